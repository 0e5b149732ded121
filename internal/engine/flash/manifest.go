package flash

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/distash/distash/internal/fsys"
)

// The manifest. A durable engine keeps, in the checksummed file MANIFEST
// (fsys.WriteChecked: a header with the payload's length and CRC-32C), the
// list of its segments: each sealed segment with its final size and the
// CRC-32C of its whole content, and the active one. Open checks the
// directory against it, so damage at rest that the frames' own checksums
// cannot show is found:
//
//   - a listed segment that is missing, or an unlisted one holding data,
//   - a sealed segment truncated or extended (even at a frame boundary),
//     or with any byte changed (its whole-file checksum),
//   - a segment renamed over another (its header names its id),
//   - frames out of sequence across segments (sequence numbers increase
//     through the log).
//
// Each is a *fsys.DamageError naming the file. What stays normal recovery
// is a torn tail of the active segment: its last frame incomplete or
// failing its checksum, with no valid frame after it, which a crash during
// a group commit leaves; that frame was never acknowledged and is dropped.
// The same check cannot tell a truncation of the active segment at a frame
// boundary from a shorter log: the active segment's length is recorded only
// once it is sealed (docs/flash.md).
//
// The manifest is rewritten when a segment is sealed (after the new
// active segment is durable) and when the cleaner removes one (after its
// live entries are durable elsewhere, before its file is deleted). A
// crash between those steps leaves an unlisted segment file that Open
// removes: a new active segment holding only its header, or a cleaned one.
const manifestName = "MANIFEST"

const manifestMagic = "distash flash manifest v1"

type sealedSeg struct {
	id   uint32
	size int64
	sum  uint32
}

type manifest struct {
	sealed []sealedSeg // ascending ids
	active uint32
}

func (m *manifest) encode() []byte {
	var b strings.Builder
	b.WriteString(manifestMagic + "\n")
	for _, s := range m.sealed {
		fmt.Fprintf(&b, "sealed %d size %d crc32c %08x\n", s.id, s.size, s.sum)
	}
	fmt.Fprintf(&b, "active %d\n", m.active)
	return []byte(b.String())
}

// readManifest returns the manifest at path, nil if there is none.
func readManifest(f fsys.FS, path string) (*manifest, error) {
	b, legacy, err := fsys.ReadChecked(f, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if legacy {
		return nil, fsys.Damaged(path, "no checksummed header")
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) < 2 || lines[0] != manifestMagic {
		return nil, fsys.Damaged(path, "not a flash manifest")
	}
	m := &manifest{}
	for i, line := range lines[1:] {
		var s sealedSeg
		if i == len(lines)-2 {
			if _, err := fmt.Sscanf(line, "active %d", &m.active); err != nil || m.active == 0 {
				return nil, fsys.Damaged(path, "bad line %q", line)
			}
			break
		}
		if _, err := fmt.Sscanf(line, "sealed %d size %d crc32c %x", &s.id, &s.size, &s.sum); err != nil || s.id == 0 {
			return nil, fsys.Damaged(path, "bad line %q", line)
		}
		if n := len(m.sealed); n > 0 && m.sealed[n-1].id >= s.id {
			return nil, fsys.Damaged(path, "segments out of order at %q", line)
		}
		m.sealed = append(m.sealed, s)
	}
	if n := len(m.sealed); n > 0 && m.sealed[n-1].id >= m.active {
		return nil, fsys.Damaged(path, "sealed segment %d after the active one %d", m.sealed[n-1].id, m.active)
	}
	return m, nil
}

// writeManifest records the engine's segments. The caller holds wmu (or
// is opening the engine). Ephemeral engines keep none.
func (e *Engine) writeManifest() error {
	if !e.durable {
		return nil
	}
	e.mu.RLock()
	m := &manifest{active: e.active.id}
	for id, s := range e.segs {
		if s != e.active {
			m.sealed = append(m.sealed, sealedSeg{id: id, size: s.size, sum: s.sum})
		}
	}
	e.mu.RUnlock()
	slices.SortFunc(m.sealed, func(a, b sealedSeg) int { return int(a.id) - int(b.id) })
	if err := fsys.WriteChecked(e.fs, e.fs.PathJoin(e.dir, manifestName), m.encode()); err != nil {
		return fmt.Errorf("flash: manifest: %w", err)
	}
	return nil
}

// recoverAll recovers a durable engine from the segment files ids
// (ascending) found in its directory, checked against the manifest.
func (e *Engine) recoverAll(ids []uint32) error {
	mpath := e.fs.PathJoin(e.dir, manifestName)
	m, err := readManifest(e.fs, mpath)
	if err != nil {
		return err
	}
	if m == nil {
		return e.recoverUnlisted(ids, mpath)
	}
	present := make(map[uint32]bool, len(ids))
	for _, id := range ids {
		present[id] = true
	}
	listed := map[uint32]bool{m.active: true}
	for _, s := range m.sealed {
		listed[s.id] = true
	}
	for _, id := range ids {
		if listed[id] {
			continue
		}
		path := e.fs.PathJoin(e.dir, segName(id))
		if id > m.active {
			// A rotation's new segment that the manifest never recorded:
			// nothing was written to it yet, it holds its header only.
			if fi, err := e.fs.Stat(path); err != nil || fi.Size() != segHeaderSize {
				return fsys.Damaged(path, "not in the manifest %s (active segment %d) and not a new empty segment", mpath, m.active)
			}
			if _, err := readHeader(e.fs, path); err != nil {
				return err
			}
		}
		// Below the active one: a cleaned segment whose file outlived the
		// manifest's update.
		if err := e.fs.Remove(path); err != nil {
			return fmt.Errorf("flash: remove unlisted segment: %w", err)
		}
	}
	for _, s := range m.sealed {
		path := e.fs.PathJoin(e.dir, segName(s.id))
		if !present[s.id] {
			return fsys.Damaged(path, "missing: the manifest %s lists it as a sealed segment of %d bytes", mpath, s.size)
		}
		if err := e.recoverSegment(s.id, false, &s); err != nil {
			return err
		}
	}
	if !present[m.active] {
		return fsys.Damaged(e.fs.PathJoin(e.dir, segName(m.active)), "missing: the manifest %s names it the active segment", mpath)
	}
	if err := e.recoverSegment(m.active, true, nil); err != nil {
		return err
	}
	e.nextSeg = m.active + 1
	e.active = e.segs[m.active]
	if e.active.size >= e.cfg.SegmentBytes {
		return e.rotate()
	}
	return nil
}

// recoverUnlisted recovers a directory without a manifest: a new engine,
// or one written before manifests existed, whose segments' headers say so
// (a segment written under a manifest means the manifest went missing).
// It then writes the manifest.
func (e *Engine) recoverUnlisted(ids []uint32, mpath string) error {
	for _, id := range ids {
		path := e.fs.PathJoin(e.dir, segName(id))
		hdr, err := readHeader(e.fs, path)
		if err != nil {
			return err
		}
		if segIsManaged(hdr) {
			return fsys.Damaged(mpath, "missing, but segment %s was written under a manifest", path)
		}
	}
	for i, id := range ids {
		if err := e.recoverSegment(id, i == len(ids)-1, nil); err != nil {
			return err
		}
	}
	if len(ids) > 0 {
		e.nextSeg = ids[len(ids)-1] + 1
		last := e.segs[ids[len(ids)-1]]
		if last.size < e.cfg.SegmentBytes {
			e.active = last
			return e.writeManifest()
		}
	}
	return e.rotate()
}

// readHeader reads and checks the header of the segment file path.
func readHeader(f fsys.FS, path string) ([]byte, error) {
	file, err := f.Open(path)
	if err != nil {
		return nil, fmt.Errorf("flash: open segment: %w", err)
	}
	defer file.Close()
	b := make([]byte, segHeaderSize)
	n, err := file.ReadAt(b, 0)
	if n < segHeaderSize && err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("flash: read segment %s: %w", path, err)
	}
	if _, err := checkSegHeader(path, b[:n]); err != nil {
		return nil, err
	}
	return b, nil
}
