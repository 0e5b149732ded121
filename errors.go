package distash

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/protover"
	"github.com/distash/distash/internal/wire"
)

// Error is a DiStash error: a numeric code, as FoundationDB's, and a
// message. Match errors with errors.Is against the Err* values; two Errors
// match when their codes are equal.
type Error struct {
	Code    int
	Message string
}

func (e *Error) Error() string {
	name := kv.Code(e.Code).Name()
	if e.Message == "" {
		return fmt.Sprintf("distash: %s (%d)", name, e.Code)
	}
	return fmt.Sprintf("distash: %s (%d): %s", name, e.Code, e.Message)
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Retryable reports whether running the transaction again may succeed.
func (e *Error) Retryable() bool { return kv.Code(e.Code).Retryable() }

func codeErr(c kv.Code) *Error { return &Error{Code: int(c)} }

// Errors a transaction may return. Match them with errors.Is.
var (
	// ErrNotCommitted: a key the transaction read was written by a
	// transaction that committed after its read version. Retryable.
	ErrNotCommitted = codeErr(kv.CodeNotCommitted)
	// ErrTransactionTooOld: the read version fell out of the MVCC window
	// (5 s by default). Retryable.
	ErrTransactionTooOld = codeErr(kv.CodeTransactionTooOld)
	// ErrCommitUnknownResult: the commit may or may not have happened.
	// Transact retries it, so transactions should be idempotent.
	ErrCommitUnknownResult = codeErr(kv.CodeCommitUnknownResult)
	// ErrConnectionFailed: a read or read-version request failed in transit.
	// Retryable: reads have no effects.
	ErrConnectionFailed = codeErr(kv.CodeConnectionFailed)
	// ErrFutureVersion: a stash has not caught up with the read version yet. Retryable.
	ErrFutureVersion = codeErr(kv.CodeFutureVersion)
	// ErrWrongShardServer: a stash no longer holds a key. Retryable; the
	// client refreshes its shard locations.
	ErrWrongShardServer = codeErr(kv.CodeWrongShardServer)
	// ErrKeyTooLarge: a key longer than 10,000 bytes.
	ErrKeyTooLarge = codeErr(kv.CodeKeyTooLarge)
	// ErrValueTooLarge: a value longer than 100,000 bytes.
	ErrValueTooLarge = codeErr(kv.CodeValueTooLarge)
	// ErrTransactionTooLarge: mutations and conflict ranges over 10,000,000 bytes.
	ErrTransactionTooLarge = codeErr(kv.CodeTransactionTooLarge)
	// ErrPoolFull: a durable pool would exceed its capacity; nothing of the
	// transaction was applied.
	ErrPoolFull = codeErr(kv.CodePoolFull)
	// ErrKeyOutsidePools: a key no pool's prefix covers.
	ErrKeyOutsidePools = codeErr(kv.CodeKeyOutsidePools)
	// ErrUnknownPool: DB.Pool was given a name no pool has.
	ErrUnknownPool = codeErr(kv.CodeUnknownPool)
	// ErrUnsupported: the pool cannot do what was asked (ColdestKeys of a
	// pool whose engine keeps no recency order).
	ErrUnsupported = codeErr(kv.CodeUnsupported)
	// ErrStashUnavailable: the stash asked has failed (its engine or its
	// log pull stopped) and is being restarted; the client reads from
	// another replica of the shard, and Transact retries. Also a commit
	// that writes to a shard with no replica left (every stash that held
	// it was retired: its data is lost until a restore), and a read of
	// one; the error names the shard. Retryable.
	ErrStashUnavailable = codeErr(kv.CodeStashUnavailable)
	// ErrWrongNode: in a multi-process cluster, the node asked no longer
	// holds the role (a recovery moved the proxies); the client asks the
	// coordinators where the roles are now, and Transact retries. Retryable.
	ErrWrongNode = codeErr(kv.CodeWrongNode)
	// ErrStashDamaged: the data asked for is held by one replica only
	// (a pool with replication 1) and that stash found damage in its
	// files: it cannot vouch for the data and refuses to serve it until
	// an operator restores its files. Not retryable: waiting does not
	// mend them. With more replicas a damaged stash is rebuilt from the
	// others and reads go to them (ErrStashUnavailable).
	ErrStashDamaged = codeErr(kv.CodeStashDamaged)
	// ErrPermissionDenied: the identity of the connection (its client
	// certificate or bearer token) lacks a permission the request needs,
	// on a cluster with [auth] (docs/security.md). The message names the
	// identity, the permission and the pool. Nothing of a refused commit is
	// applied. Not retryable.
	ErrPermissionDenied = codeErr(kv.CodePermissionDenied)
	// ErrInvalidMutation: a malformed mutation (an atomic operand longer than
	// 8 bytes, a clear range whose end precedes its begin).
	ErrInvalidMutation = codeErr(kv.CodeInvalidMutation)
	// ErrIncompatibleProtocol: the client and a node of the cluster speak
	// no protocol version in common (one of them is of a release too old
	// or too new for the other); the message names both ranges. Not
	// retryable: upgrade or roll back one side (docs/operations.md).
	ErrIncompatibleProtocol = codeErr(kv.CodeIncompatibleProtocol)
	// ErrUsedDuringCommit: the transaction was used after Commit.
	ErrUsedDuringCommit = &Error{Code: 2017, Message: "transaction used after commit"}
)

func errorf(c kv.Code, format string, args ...any) *Error {
	return &Error{Code: int(c), Message: fmt.Sprintf(format, args...)}
}

// transportErr wraps a failed RPC that has no effects (a read) as a
// retryable ErrConnectionFailed, keeping the cause, or, if a side refused
// the other's protocol versions, as ErrIncompatibleProtocol.
func transportErr(err error) error {
	if err == nil {
		return nil
	}
	var de *Error
	if errors.As(err, &de) {
		return err
	}
	if msg, ok := protover.IsRefusal(err); ok {
		return &Error{Code: int(kv.CodeIncompatibleProtocol), Message: msg}
	}
	if e := permissionErr(err); e != nil {
		return e
	}
	return &Error{Code: int(kv.CodeConnectionFailed), Message: err.Error()}
}

func fromWire(e *wire.Error) error {
	if e == nil || e.Code == 0 {
		return nil
	}
	return &Error{Code: int(e.Code), Message: e.Detail}
}

// retryable reports whether err is a DiStash error worth retrying.
func retryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable()
}

// permissionErr is a call the cluster refused with gRPC's PermissionDenied
// for the caller's identity ([auth]: a call whose response has no error
// field) as ErrPermissionDenied; nil for any other error.
func permissionErr(err error) *Error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.PermissionDenied {
		return nil
	}
	prefix := fmt.Sprintf("%s (%d): ", kv.CodePermissionDenied.Name(), kv.CodePermissionDenied)
	msg, found := strings.CutPrefix(st.Message(), prefix)
	if !found {
		return nil
	}
	return &Error{Code: int(kv.CodePermissionDenied), Message: msg}
}
