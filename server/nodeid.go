package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/distash/distash/internal/fsys"
)

// A node's id, kept in its directory.

// nodeIDFile holds a node's id in its directory.
const nodeIDFile = "node-id"

// nodeID returns the node's id, kept in its directory across restarts (a
// restarted stash node gets its slot back by it), checksummed. A damaged
// file is refused with an error naming it: a node that took a new id
// would come back as another node (a log replica the cluster no longer
// knows, a stash in a new slot).
func nodeID(f fsys.FS, dir string) (string, error) {
	path := filepath.Join(dir, nodeIDFile)
	b, _, err := fsys.ReadChecked(f, path)
	if raw, rerr := fsys.ReadFile(f, path); rerr == nil && len(raw) == 0 {
		// Written without checksums and cut short as it was created:
		// the node never registered with it.
		err = fs.ErrNotExist
	}
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id != "" && !strings.ContainsAny(id, " \t\n") {
			return id, nil
		}
		err = fsys.Damaged(path, "holds %q, not a node id", b)
	}
	if !errors.Is(err, fs.ErrNotExist) && !os.IsNotExist(err) {
		return "", fmt.Errorf("server: this node's id: %w (restore the file; removing it makes the node join as a new one)", err)
	}
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	id := "n-" + hex.EncodeToString(r[:])
	if err := fsys.WriteChecked(f, path, []byte(id+"\n")); err != nil {
		return "", err
	}
	return id, nil
}

// incarnationFile holds the sequence of the node's last incarnation.
const incarnationFile = "incarnation"

// newIncarnation names this start of the node's process: "<seq>.<random>",
// seq increasing from one start of the node to the next (the start time in
// nanoseconds, above the last start's, kept in the node's directory, so a
// clock that stepped back does not reorder them). Sent with each of the
// process's registrations (retries included), it tells the controller
// that a second registration of the process is a retry of the first, not
// a new process that came back empty, and that a registration of an
// earlier process, still in flight when it was killed, is stale and must
// not undo its successor's (coord.RegisterStash). Keeping seq is best
// effort: a node whose disk is full starts all the same.
func newIncarnation(f fsys.FS, dir string, logger *slog.Logger) string {
	seq := uint64(time.Now().UnixNano())
	path := filepath.Join(dir, incarnationFile)
	if b, _, err := fsys.ReadChecked(f, path); err == nil {
		if last, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && last >= seq {
			seq = last + 1
		}
	}
	if err := fsys.WriteChecked(f, path, []byte(strconv.FormatUint(seq, 10)+"\n")); err != nil {
		logger.Warn("could not keep this start's incarnation in the node's directory; a later start orders after it by its clock only", "err", err)
	}
	var r [8]byte
	_, _ = rand.Read(r[:]) // crypto/rand's Read does not fail
	return strconv.FormatUint(seq, 10) + "." + hex.EncodeToString(r[:])
}
