package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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

// newIncarnation returns a random name for this start of the node's
// process: sent with each of its registrations (retries included), it
// tells the controller that a second registration of the process is a
// retry of the first, not a new process that came back empty
// (coord.RegisterStash).
func newIncarnation() string {
	var r [8]byte
	_, _ = rand.Read(r[:]) // crypto/rand's Read does not fail
	return hex.EncodeToString(r[:])
}
