package version

import (
	"errors"
	"strings"
	"testing"
)

func TestSupportedProtocols(t *testing.T) {
	for v := MinProtocol - 1; v <= Protocol+1; v++ {
		want := v >= MinProtocol && v <= Protocol
		if got := Supported(v); got != want {
			t.Errorf("Supported(%d) = %v, want %v", v, got, want)
		}
	}
}

func TestCheckFormatRefusesNewerNamingBoth(t *testing.T) {
	if err := CheckFormat("stash-ownership", 1, 2); err != nil {
		t.Fatalf("older format refused: %v", err)
	}
	if err := CheckFormat("stash-ownership", 2, 2); err != nil {
		t.Fatalf("same format refused: %v", err)
	}
	err := CheckFormat("stash-ownership", 3, 2)
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("newer format: got %v, want a *FormatError", err)
	}
	msg := err.Error()
	for _, want := range []string{"stash-ownership", "version 3", "binary's 2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
}

func TestProtocolErrorNamesBoth(t *testing.T) {
	msg := (&ProtocolError{Peer: "server 10.0.0.1:4500", PeerMin: 7, PeerMax: 7, Min: 1, Max: 2}).Error()
	for _, want := range []string{"10.0.0.1:4500", "versions 7,", "speaks 1 to 2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
}

func TestRegisterFormatTwicePanics(t *testing.T) {
	RegisterFormat("test-kind-once", 1)
	defer delete(formats, "test-kind-once")
	defer func() {
		if recover() == nil {
			t.Fatal("a kind registered twice did not panic")
		}
	}()
	RegisterFormat("test-kind-once", 1)
}

func TestCurrentHasGoVersion(t *testing.T) {
	b := Current()
	if !strings.HasPrefix(b.GoVersion, "go") || b.Module == "" || b.Version == "" {
		t.Fatalf("incomplete build info: %+v", b)
	}
}
