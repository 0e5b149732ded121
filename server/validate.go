package server

import (
	"bytes"
	"context"
	"fmt"
	"runtime/debug"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/proxy"
	"github.com/distash/distash/internal/wire"
)

// The server trusts nothing it receives: every request is checked here, at
// the boundary, before any role sees it, and a bad one is answered with
// invalid_mutation (or the specific size error) rather than reaching code
// that assumes well-formed input. Sub-messages may be nil and integers may
// be out of range on the wire; nothing below this file has to care.

// MaxReadKeys bounds the keys of one Read request.
const MaxReadKeys = 100_000

// MaxColdestKeys bounds the keys one Coldest request may ask for.
const MaxColdestKeys = 1_000_000

func invalid(format string, args ...any) error {
	return kv.Errorf(kv.CodeInvalidMutation, format, args...)
}

// checkVersion refuses a negative version (versions start at 0).
func checkVersion(what string, v int64) error {
	if v < 0 {
		return invalid("%s %d is negative", what, v)
	}
	return nil
}

// checkRange refuses a range whose begin is after its end, or whose keys
// are larger than any key can be.
func checkRange(what string, begin, end []byte) error {
	if len(begin) > kv.MaxKeyBytes+1 || len(end) > kv.MaxKeyBytes+1 {
		return kv.Errorf(kv.CodeKeyTooLarge, "%s bound of %d bytes (limit %d)", what, max(len(begin), len(end)), kv.MaxKeyBytes)
	}
	if bytes.Compare(begin, end) > 0 {
		return invalid("%s [%.40q, %.40q) ends before it begins", what, begin, end)
	}
	return nil
}

// fromWireCommit checks a commit request and converts it. The mutation type
// is checked on its 32 bits, before it is narrowed to kv.MutationType.
func fromWireCommit(req *wire.CommitRequest) (proxy.Txn, error) {
	var t proxy.Txn
	if req == nil {
		return t, invalid("commit request missing")
	}
	if err := checkVersion("read version", req.ReadVersion); err != nil {
		return t, err
	}
	for _, rs := range [][]*wire.KeyRange{req.ReadConflicts, req.WriteConflicts} {
		for i, r := range rs {
			if r == nil {
				return t, invalid("conflict range %d missing", i)
			}
			if err := checkRange("conflict range", r.Begin, r.End); err != nil {
				return t, err
			}
		}
	}
	t.ReadVersion = kv.Version(req.ReadVersion)
	t.Unthrottled = req.UnthrottledReadVersion
	t.ReadConflicts = fromWireRanges(req.ReadConflicts)
	t.WriteConflicts = fromWireRanges(req.WriteConflicts)
	t.Mutations = make([]kv.Mutation, len(req.Mutations))
	for i, m := range req.Mutations {
		if m == nil {
			return t, invalid("mutation %d missing", i)
		}
		if m.Type < uint32(kv.MutSet) || m.Type > uint32(kv.MutMin) {
			return t, invalid("mutation %d: unknown mutation type %d", i, m.Type)
		}
		t.Mutations[i] = kv.Mutation{Type: kv.MutationType(m.Type), Key: m.Key, Param: m.Param, Cost: m.Cost}
	}
	return t, nil
}

func checkRead(req *wire.ReadRequest) error {
	if err := checkVersion("read version", req.Version); err != nil {
		return err
	}
	if len(req.Keys) == 0 {
		return invalid("read of no keys")
	}
	if len(req.Keys) > MaxReadKeys {
		return invalid("read of %d keys (limit %d)", len(req.Keys), MaxReadKeys)
	}
	for _, k := range req.Keys {
		if len(k) > kv.MaxKeyBytes {
			return kv.Errorf(kv.CodeKeyTooLarge, "key of %d bytes (limit %d)", len(k), kv.MaxKeyBytes)
		}
		if !req.ReadSystemKeys && bytes.HasPrefix(k, kv.SystemPrefix) {
			return systemKeysRefused()
		}
	}
	return nil
}

// systemKeysRefused is the error of a read of \xff keys without the
// read_system_keys option.
func systemKeysRefused() error {
	return kv.Errorf(kv.CodeKeyOutsidePools, "a read of the system key space needs the read_system_keys option (tr.Options().SetReadSystemKeys())")
}

func checkReadRange(req *wire.ReadRangeRequest) error {
	if err := checkVersion("read version", req.Version); err != nil {
		return err
	}
	if req.Limit < 0 {
		return invalid("limit %d is negative", req.Limit)
	}
	if req.ByteLimit < 0 {
		return invalid("byte limit %d is negative", req.ByteLimit)
	}
	if !req.ReadSystemKeys && bytes.Compare(req.End, kv.SystemPrefix) > 0 {
		return systemKeysRefused()
	}
	return checkRange("range", req.Begin, req.End)
}

func checkColdest(req *wire.ColdestRequest) error {
	if req.Limit < 0 || req.Limit > MaxColdestKeys {
		return invalid("limit %d is outside [0, %d]", req.Limit, MaxColdestKeys)
	}
	return nil
}

// recoverUnary turns a panic in a unary handler into an internal error for
// that call: the process and every other request keep going. Validation
// should make this unreachable; it is the last line, and it logs the stack
// so the bug can be found.
func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.logger.Error("panic in request handler", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "internal error in %s", info.FullMethod)
		}
	}()
	return handler(ctx, req)
}

// recoverStream is recoverUnary for streams.
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.logger.Error("panic in stream handler", "method", info.FullMethod, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = status.Errorf(codes.Internal, "internal error in %s", info.FullMethod)
		}
	}()
	return handler(srv, ss)
}
