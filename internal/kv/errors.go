package kv

import "fmt"

// Code is a numeric error code, as FoundationDB's. Codes cross the wire; the
// client turns them into the exported distash.Err* values.
type Code int32

// Error codes. The 1xxx and 2xxx numbers are FoundationDB's; 2200+ are DiStash's own.
const (
	CodeOK                  Code = 0
	CodeWrongShardServer    Code = 1001
	CodeTransactionTooOld   Code = 1007
	CodeFutureVersion       Code = 1009
	CodeNotCommitted        Code = 1020
	CodeConnectionFailed    Code = 1026
	CodeCommitUnknownResult Code = 1021
	CodeProcessBehind       Code = 1037
	CodeTransactionTooLarge Code = 2101
	CodeKeyTooLarge         Code = 2102
	CodeValueTooLarge       Code = 2103
	CodeInvalidMutation     Code = 2004
	CodePoolFull            Code = 2200
	CodeKeyOutsidePools     Code = 2201
	CodeUnknownPool         Code = 2202
	CodeUnsupported         Code = 2203
	CodeStashUnavailable    Code = 2204
	CodeWrongNode           Code = 2205 // the role asked for is not on this node (any more): ask the coordinators
	CodeStashDamaged        Code = 2206 // a damaged stash holds the only replica of the data asked: not retryable
	CodePermissionDenied    Code = 2207 // the caller's identity lacks a permission the request needs (docs/security.md): not retryable
	CodeInternal            Code = 4100
)

// CodeIncompatibleProtocol: the peer speaks no protocol version this
// binary speaks (internal/protover). Not retryable.
const CodeIncompatibleProtocol Code = 2208

// Retryable reports whether a transaction that failed with c may succeed if run again.
func (c Code) Retryable() bool {
	switch c {
	case CodeNotCommitted, CodeTransactionTooOld, CodeFutureVersion, CodeCommitUnknownResult,
		CodeWrongShardServer, CodeProcessBehind, CodeConnectionFailed, CodeStashUnavailable, CodeWrongNode:
		return true
	}
	return false
}

// Name is the code's FoundationDB-style snake_case name.
func (c Code) Name() string {
	switch c {
	case CodeOK:
		return "success"
	case CodeWrongShardServer:
		return "wrong_shard_server"
	case CodeTransactionTooOld:
		return "transaction_too_old"
	case CodeFutureVersion:
		return "future_version"
	case CodeNotCommitted:
		return "not_committed"
	case CodeCommitUnknownResult:
		return "commit_unknown_result"
	case CodeConnectionFailed:
		return "connection_failed"
	case CodeProcessBehind:
		return "process_behind"
	case CodeTransactionTooLarge:
		return "transaction_too_large"
	case CodeKeyTooLarge:
		return "key_too_large"
	case CodeValueTooLarge:
		return "value_too_large"
	case CodeInvalidMutation:
		return "invalid_mutation"
	case CodePoolFull:
		return "pool_full"
	case CodeKeyOutsidePools:
		return "key_outside_pools"
	case CodeUnknownPool:
		return "unknown_pool"
	case CodeUnsupported:
		return "unsupported"
	case CodeStashUnavailable:
		return "stash_unavailable"
	case CodeWrongNode:
		return "wrong_node"
	case CodeStashDamaged:
		return "stash_damaged"
	case CodeIncompatibleProtocol:
		return "incompatible_protocol"
	case CodePermissionDenied:
		return "permission_denied"
	case CodeInternal:
		return "internal_error"
	}
	return fmt.Sprintf("error_%d", int32(c))
}

// Error is an error carrying a code and a detail message. Two Errors match
// under errors.Is when their codes are equal.
type Error struct {
	Code   Code
	Detail string
}

// Errorf builds an Error with a formatted detail.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Detail: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%s (%d)", e.Code.Name(), e.Code)
	}
	return fmt.Sprintf("%s (%d): %s", e.Code.Name(), e.Code, e.Detail)
}

// Is matches any *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// CodeOf returns the code of err if it is (or wraps) an *Error, else CodeInternal.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var e *Error
	for x := err; x != nil; {
		if ee, ok := x.(*Error); ok {
			e = ee
			break
		}
		u, ok := x.(interface{ Unwrap() error })
		if !ok {
			break
		}
		x = u.Unwrap()
	}
	if e == nil {
		return CodeInternal
	}
	return e.Code
}
