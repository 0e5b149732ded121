package wire

import (
	"errors"

	"github.com/distash/distash/internal/kv"
)

// ErrorOf is err as it travels in a response: its kv code and detail (a
// *kv.Error, or one it wraps), else internal_error with its text; nil for
// nil.
func ErrorOf(err error) *Error {
	if err == nil {
		return nil
	}
	var ke *kv.Error
	if errors.As(err, &ke) {
		return &Error{Code: int32(ke.Code), Detail: ke.Detail}
	}
	return &Error{Code: int32(kv.CodeOf(err)), Detail: err.Error()}
}

// Err is e as a *kv.Error, nil for a nil e.
func (e *Error) Err() error {
	if e == nil {
		return nil
	}
	return &kv.Error{Code: kv.Code(e.Code), Detail: e.Detail}
}
