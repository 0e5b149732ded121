// Package version says what this build is and which versions of the wire
// protocol and of the persistent formats it speaks, so that an operator can
// tell whether two binaries can run in one cluster and a process can refuse
// a peer or a file it does not understand instead of misreading it.
//
// The protocol version changes when a message or a rule of the wire changes
// in a way an older peer would misread; a binary speaks every version from
// MinProtocol to Protocol. A format version changes when the bytes of a
// persistent file kind change; a binary reads every version of a kind up to
// its own and refuses a newer one.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
)

// Protocol is the newest wire protocol version this binary speaks. Version
// 1 is every release before versions were stated; 2 states them on every
// connection and is otherwise the same wire.
const Protocol = 2

// MinProtocol is the oldest protocol version this binary still speaks: a
// peer whose versions do not overlap MinProtocol..Protocol is refused.
const MinProtocol = 1

// Supported reports whether a peer stating protocol version v can be
// served.
func Supported(v int) bool { return v >= MinProtocol && v <= Protocol }

// Build describes the binary.
type Build struct {
	Module    string // module path
	Version   string // module version ("(devel)" for a build from a checkout)
	Commit    string // VCS revision, "" if unknown
	Modified  bool   // built from a work tree with uncommitted changes
	GoVersion string
}

// release and commit may be set at link time, for builds whose VCS stamp
// is off (GOFLAGS=-buildvcs=false, go run):
//
//	go build -ldflags "-X github.com/distash/distash/internal/version.commit=$(git rev-parse HEAD) \
//	  -X github.com/distash/distash/internal/version.release=v0.9.0" ./cmd/distash
var release, commit string

// Current returns the running binary's build.
func Current() (b Build) {
	b = Build{Module: "github.com/distash/distash", Version: "(devel)", GoVersion: runtime.Version()}
	defer func() {
		if release != "" {
			b.Version = release
		}
		if commit != "" {
			b.Commit = commit
		}
	}()
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if info.Main.Path != "" {
		b.Module = info.Main.Path
	}
	if info.Main.Version != "" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is a one-line description: version, commit, Go.
func (b Build) String() string {
	commit := b.ShortCommit()
	if b.Commit == "" {
		commit = "unknown" + commit // "" or "+dirty"
	}
	return fmt.Sprintf("%s %s (commit %s, %s)", b.Module, b.Version, commit, b.GoVersion)
}

// ShortCommit is the commit's first 12 hex digits, with "+dirty" if the
// work tree had changes ("" if unknown and clean).
func (b Build) ShortCommit() string {
	commit := b.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if b.Modified {
		commit += "+dirty"
	}
	return commit
}

// Formats returns the persistent file kinds and the newest format version
// of each that this binary writes (and reads, with every older one).
func Formats() map[string]int {
	out := make(map[string]int, len(formats))
	for k, v := range formats {
		out[k] = v
	}
	return out
}

// formats is the registry behind Formats; a package that owns a file kind
// registers it with RegisterFormat from an init function.
var formats = map[string]int{}

// RegisterFormat records that the calling package writes files of kind at
// format version v. It panics on a kind registered twice (a programming
// error).
func RegisterFormat(kind string, v int) {
	if _, dup := formats[kind]; dup {
		panic("version: format kind " + kind + " registered twice")
	}
	formats[kind] = v
}

// FormatList is Formats as "kind=version" lines in kind order.
func FormatList() []string {
	var out []string
	for k, v := range formats {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return out
}

// CheckFormat decides whether a file of kind written at format version got
// can be read by this binary, which writes version want: a newer one is
// refused naming both (never misread); an older or equal one is readable.
func CheckFormat(kind string, got, want int) error {
	if got > want {
		return &FormatError{Kind: kind, Got: got, Want: want}
	}
	return nil
}

// FormatError is a persistent file written by a newer binary.
type FormatError struct {
	Kind      string
	Got, Want int
	Path      string // the file, when known
}

func (e *FormatError) Error() string {
	where := ""
	if e.Path != "" {
		where = " (" + e.Path + ")"
	}
	return fmt.Sprintf("%s%s has format version %d, newer than this binary's %d: it was written by a newer distash; run that version, or restore a backup (%s)",
		e.Kind, where, e.Got, e.Want, strings.TrimSpace(Current().String()))
}

// ProtocolError is a peer with which this binary has no protocol version in
// common.
type ProtocolError struct {
	Peer             string // who: "client ADDR", "server ADDR"
	PeerMin, PeerMax int    // the versions the peer speaks
	Min, Max         int    // the versions this side speaks
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("%s speaks protocol versions %s, this binary speaks %s: no version in common; upgrade or roll back one side (docs/operations.md)",
		e.Peer, span(e.PeerMin, e.PeerMax), span(e.Min, e.Max))
}

func span(lo, hi int) string {
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d to %d", lo, hi)
}
