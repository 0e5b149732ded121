// Package flash is DiStash's SSD engine ("flash"): a Flashstore-like
// append-only log of checksummed records on SSD, a compact hash index that
// can be placed in emulated microsecond-latency memory (package farmem), a
// DRAM write buffer and a read cache. See docs/flash.md.
//
// Writes. Apply turns a batch into the net effect on each key it touches
// and appends it as one frame to the active segment file; concurrent
// Applys are coalesced by a group commit (one frame, one write, one fsync
// for the whole group). A frame carries a checksum over all its entries,
// so a batch is all-or-nothing after a crash, and the engine's version, so
// Version survives a restart. Each entry carries its own checksum too, so
// a point read verifies exactly what it fetched.
//
// Index. A key's 64-bit hash gives a bucket (one 64-byte line holding four
// slots) and a 32-bit signature; a slot maps the signature to the entry's
// segment, offset and length. A lookup reads candidate entries and compares
// their keys, so collisions cost a read but never a wrong answer. Lookups
// go through a farmem.Ctx: with GetCtx on a user-level thread
// (package ult), the lookup prefetches the bucket and yields before
// touching it, and yields again around the SSD read.
//
// Ordered scans need key order, which a hash index lacks: the engine also
// keeps every key in DRAM in a B-tree (github.com/google/btree) mapping it
// to its location. Only the writer path and Scan use the tree; point reads
// touch only the hash index. Scan iterates a copy-on-write clone of the
// tree with every segment pinned, so it sees one consistent state and calls
// fn without locks held.
//
// Space. Overwritten and deleted entries are garbage; a background cleaner
// copies the live entries of segments whose live share fell below
// Config.GCLiveRatio to the head of the log and deletes the segment. A
// tombstone is copied too while an older segment may still hold a record
// of its key (each segment keeps a Bloom filter of the keys it stores).
//
// Durable or ephemeral. A durable engine (the default) fsyncs every group
// commit and recovers by scanning its segments: a torn tail (the last frame
// of the last segment, incomplete or failing its checksum, with no valid
// frame after it) is dropped; any other damage is a *CorruptionError
// naming the file and the offset. An ephemeral engine (Options.Ephemeral)
// never syncs, starts empty on every Open (its files are scratch space, as
// a restarted cache stash rejoins empty) and, with a capacity, evicts the
// coldest keys by its policy ("lru" or "camp") so that the live key and
// value bytes never exceed the capacity once Apply returns.
package flash

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/google/btree"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/engine/engines"
	"github.com/distash/distash/internal/farmem"
	"github.com/distash/distash/internal/farmem/ult"
	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/version"
)

func init() {
	version.RegisterFormat(engines.FormatKind("flash"), 1) // segments (format.go)
	engines.Register("flash", func(o engine.Options) (engine.Engine, error) {
		cfg, ok := o.Tuning.(Config)
		if !ok && o.Tuning != nil {
			return nil, fmt.Errorf("flash: engine.Options.Tuning is a %T, want a flash.Config", o.Tuning)
		}
		return OpenConfig(o, cfg)
	})
}

// ErrClosed is returned by the methods of a closed engine.
var ErrClosed = errors.New("flash engine: closed")

// Config tunes an engine beyond engine.Options; the zero value is the default.
type Config struct {
	// SegmentBytes is the size at which the log moves to a new segment
	// file; 0 means 64 MiB (ephemeral engines with a capacity: a quarter of
	// it, at least 64 KiB).
	SegmentBytes int64
	// WriteBufferBytes is how much of the log's recent bytes stay in DRAM
	// to serve reads; 0 means 4 MiB, negative disables the buffer.
	WriteBufferBytes int64
	// CacheBytes is the read cache's size; 0 means 8 MiB, negative disables it.
	CacheBytes int64
	// CacheFar places the read cache in far memory too (its lookups
	// prefetch and yield like the index's).
	CacheFar bool
	// GCLiveRatio: sealed segments whose live share is below it are
	// cleaned; 0 means 0.5.
	GCLiveRatio float64
	// DirectIO makes point reads bypass the page cache (O_DIRECT) where
	// the file system allows it.
	DirectIO bool
	// IndexBuckets is the hash index's initial size in buckets (4 slots
	// each); 0 means 1024. The index doubles when 75% full.
	IndexBuckets int
	// NoBackgroundGC leaves cleaning to explicit CollectGarbage calls.
	NoBackgroundGC bool
	// FarMemory, when positive, places the hash index and the key tree in
	// emulated memory of this latency and serves reads on the engine's own
	// user-level-thread schedulers (serve.go); 0 keeps them in DRAM.
	FarMemory time.Duration
	// NoPrefetch turns prefetching off: far-memory accesses stall for the
	// whole latency (with FarMemory).
	NoPrefetch bool
	// LookupThreads is the user-level threads per core; 0 means
	// DefaultLookupThreads(FarMemory).
	LookupThreads int
	// IO is the schedulers' read backend; ult.IOAuto (the zero value)
	// takes io_uring where the kernel allows it, else threads.
	IO ult.IOMode
	// Cores is the number of schedulers serving reads with far memory; 0
	// means DefaultServeCores().
	Cores int
}

// item is a key in the DRAM tree. Items are immutable once in the tree (an
// update replaces the item), which is what makes tree clones snapshots.
type item struct {
	key  []byte
	h    uint64
	loc  loc
	vlen uint32
	pol  *pnode // eviction order (ephemeral engines with a capacity)
}

func (it *item) size() int64 { return int64(len(it.key)) + int64(it.vlen) }

func lessItem(a, b *item) bool { return bytes.Compare(a.key, b.key) < 0 }

// Metrics are an engine's internal counters.
type Metrics struct {
	Segments       int
	LogBytes       int64 // bytes in segment files
	LiveBytes      int64 // padded bytes of live entries
	IndexBuckets   int
	GCRuns         int64 // segments cleaned
	RelocatedBytes int64 // entry bytes copied by the cleaner
	TornTailBytes  int64 // dropped at recovery
	BufferHits     int64 // reads served by the write buffer
	CacheHits      int64
	DiskReads      int64
	Commits        int64 // group commits (frames written by Apply)
	Batches        int64 // batches applied
	// Restarts counts lookups that began again because the index was
	// rebuilt under them; LockWaits counts yields of user-level threads
	// waiting for a writer to release the index.
	Restarts  int64
	LockWaits int64
}

// Engine is the flash engine. Create one with Open or OpenConfig.
type Engine struct {
	opts      engine.Options
	cfg       Config
	dir       string
	durable   bool
	ephemeral bool
	capacity  int64
	seed      maphash.Seed
	fs        fsys.FS
	osFS      bool // fs is the operating system's: point reads take the *os.File fast path
	lockFile  io.Closer
	cache     *readCache
	srv       *ult.Server // serves reads with far memory (Config.FarMemory)

	// mu protects the index, the tree, the segments and their write
	// buffers, the zombies and the eviction policy's membership. Readers
	// hold it shared and never across a yield or an IO.
	mu      sync.RWMutex
	tbl     atomic.Pointer[table]
	tree    *btree.BTreeG[*item]
	cloneMu sync.Mutex // Clone of tree is not safe concurrently with itself
	segs    map[uint32]*segment
	active  *segment
	zombies []*segment // removed from segs; their files go when unpinned
	wbList  []wbChunk  // chunks held by the write buffer, oldest first
	wbBytes int64

	pmu sync.Mutex // eviction order; readers touch it under mu held shared
	pol policy

	keys, bytes, evictions atomic.Int64
	// indexNegatives counts Gets of absent keys the in-memory index answered
	// without reading a segment file.
	indexNegatives atomic.Int64
	version        atomic.Int64

	// Group commit.
	qmu     sync.Mutex
	queue   []*commitReq
	leading bool

	// wmu serializes writers: group commits and the cleaner's relocations.
	wmu      sync.Mutex
	nextLSN  uint64 // protected by wmu
	nextSeg  uint32 // protected by wmu
	failed   error  // protected by wmu; a failed write or sync stops writes
	deadKick int64  // dead bytes since the cleaner was last kicked; protected by wmu

	gcMu   sync.Mutex // one cleaning pass at a time
	gcKick chan struct{}
	gcStop chan struct{}
	gcDone chan struct{}
	closed atomic.Bool
	// keepFiles: a manifest write failed, so the manifest on disk may still
	// list cleaned segments: their files stay.
	keepFiles atomic.Bool

	m struct {
		gcRuns, relocated, torn, bufferHits, cacheHits, diskReads, commits, batches, restarts, lockWaits atomic.Int64
	}
}

type wbChunk struct {
	s   *segment
	idx int
}

type commitReq struct {
	b    *engine.Batch
	err  error
	done chan struct{}
}

var (
	_ engine.Engine         = (*Engine)(nil)
	_ engine.RecencyOrdered = (*Engine)(nil)
	_ engine.Counted        = (*Engine)(nil)
)

// Open opens the engine in opts.Dir with the default Config.
func Open(opts engine.Options) (*Engine, error) { return OpenConfig(opts, Config{}) }

// OpenConfig opens the engine in opts.Dir: a durable engine recovers what
// is there, an ephemeral one starts empty.
func OpenConfig(opts engine.Options, cfg Config) (*Engine, error) {
	if opts.Dir == "" {
		return nil, errors.New("flash: Options.Dir is required")
	}
	fs := fsys.Or(opts.FS)
	if err := fs.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("flash: %w", err)
	}
	if !opts.Ephemeral {
		// The directory's own entry must be durable too, or a crash can
		// take the whole engine with it.
		if err := fsys.SyncDir(fs, fs.PathDir(opts.Dir)); err != nil {
			return nil, fmt.Errorf("flash: %w", err)
		}
	}
	e := &Engine{
		fs:        fs,
		osFS:      fs == fsys.Default,
		opts:      opts,
		dir:       opts.Dir,
		durable:   !opts.Ephemeral,
		ephemeral: opts.Ephemeral,
		seed:      maphash.MakeSeed(),
		tree:      btree.NewG(32, lessItem),
		segs:      make(map[uint32]*segment),
		gcKick:    make(chan struct{}, 1),
		gcStop:    make(chan struct{}),
		gcDone:    make(chan struct{}),
		nextLSN:   1,
		nextSeg:   1,
	}
	if opts.Ephemeral && opts.CapacityBytes > 0 {
		e.capacity = opts.CapacityBytes
		e.pol = newPolicy(opts.Eviction)
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = 64 << 20
		if e.capacity > 0 {
			cfg.SegmentBytes = min(max(e.capacity/4, 64<<10), 64<<20)
		}
	}
	if cfg.SegmentBytes > 1<<30 {
		cfg.SegmentBytes = 1 << 30
	}
	if cfg.WriteBufferBytes == 0 {
		cfg.WriteBufferBytes = 4 << 20
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = 8 << 20
	}
	if cfg.GCLiveRatio <= 0 {
		cfg.GCLiveRatio = 0.5
	}
	if cfg.IndexBuckets <= 0 {
		cfg.IndexBuckets = 1024
	}
	e.cfg = cfg
	e.cache = newReadCache(cfg.CacheBytes, cfg.CacheFar)
	e.tbl.Store(newTable(cfg.IndexBuckets))

	lf, err := fs.Lock(fs.PathJoin(opts.Dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("flash: lock %s: %w", opts.Dir, err)
	}
	e.lockFile = lf
	if err := e.load(); err != nil {
		e.closeFiles()
		lf.Close()
		return nil, err
	}
	if err := e.startServer(cfg); err != nil {
		e.closeFiles()
		lf.Close()
		return nil, fmt.Errorf("flash: far memory: %w", err)
	}
	if cfg.NoBackgroundGC {
		close(e.gcDone)
	} else {
		go e.gcLoop()
	}
	return e, nil
}

// load recovers a durable engine's segments or clears an ephemeral one's,
// and makes sure there is an active segment.
func (e *Engine) load() error {
	names, err := e.fs.List(e.dir)
	if err != nil {
		return fmt.Errorf("flash: %w", err)
	}
	var ids []uint32
	for _, name := range names {
		if strings.HasSuffix(name, ".seg.tmp") {
			e.fs.Remove(e.fs.PathJoin(e.dir, name))
			continue
		}
		if !strings.HasSuffix(name, ".seg") {
			continue
		}
		if e.ephemeral {
			e.fs.Remove(e.fs.PathJoin(e.dir, name))
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSuffix(name, ".seg"), 10, 32)
		if err != nil || id == 0 || name != segName(uint32(id)) {
			return fsys.Damaged(e.fs.PathJoin(e.dir, name), "unexpected file name in a flash engine's directory")
		}
		ids = append(ids, uint32(id))
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if e.ephemeral {
		return e.rotate()
	}
	return e.recoverAll(ids)
}

// newSegment creates the next segment file.
func (e *Engine) newSegment() (*segment, error) {
	s, err := e.createSegment(e.nextSeg)
	if err != nil {
		return nil, err
	}
	e.nextSeg++
	if e.durable {
		s.keys = newBloom(e.cfg.SegmentBytes)
	}
	return s, nil
}

func newBloom(segBytes int64) *bloom.BloomFilter {
	return bloom.NewWithEstimates(uint(max(1024, segBytes/128)), 0.01)
}

// rotate seals the active segment and starts a new one. The caller holds
// wmu (or is opening the engine).
func (e *Engine) rotate() error {
	s, err := e.newSegment()
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.segs[s.id] = s
	e.active = s
	e.mu.Unlock()
	// The manifest seals the previous segment (its size and checksum are
	// final) and names the new one active.
	return e.writeManifest()
}

func (e *Engine) hash(key []byte) uint64 { return maphash.Bytes(e.seed, key) }

// Version implements engine.Engine.
func (e *Engine) Version() kv.Version { return kv.Version(e.version.Load()) }

// Stats implements engine.Engine.
func (e *Engine) Stats() engine.Stats {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return engine.Stats{Keys: e.keys.Load(), Bytes: e.bytes.Load(), Evictions: e.evictions.Load(),
		FilterNegatives: e.indexNegatives.Load()}
}

// Metrics returns the engine's internal counters.
func (e *Engine) Metrics() Metrics {
	e.mu.RLock()
	m := Metrics{Segments: len(e.segs), IndexBuckets: e.tbl.Load().buckets()}
	for _, s := range e.segs {
		m.LogBytes += s.size
		m.LiveBytes += s.live
	}
	e.mu.RUnlock()
	m.GCRuns = e.m.gcRuns.Load()
	m.RelocatedBytes = e.m.relocated.Load()
	m.TornTailBytes = e.m.torn.Load()
	m.BufferHits = e.m.bufferHits.Load()
	m.CacheHits = e.m.cacheHits.Load()
	m.DiskReads = e.m.diskReads.Load()
	m.Commits = e.m.commits.Load()
	m.Batches = e.m.batches.Load()
	m.Restarts = e.m.restarts.Load()
	m.LockWaits = e.m.lockWaits.Load()
	return m
}

// Counters implements engine.Counted with the figures an operator of a
// flash pool watches: how big the log is against its live data, how much
// cleaning it took, and where reads were served from.
func (e *Engine) Counters() []engine.Counter {
	m := e.Metrics()
	return []engine.Counter{
		{Name: "segments", Value: int64(m.Segments)},
		{Name: "log_bytes", Value: m.LogBytes},
		{Name: "live_bytes", Value: m.LiveBytes},
		{Name: "segments_cleaned", Value: m.GCRuns},
		{Name: "relocated_bytes", Value: m.RelocatedBytes},
		{Name: "buffer_hits", Value: m.BufferHits},
		{Name: "cache_hits", Value: m.CacheHits},
		{Name: "file_reads", Value: m.DiskReads},
		{Name: "group_commits", Value: m.Commits},
	}
}

// Get implements engine.Engine: without far memory directly, with it as a
// lookup on the engine's schedulers.
func (e *Engine) Get(key []byte) ([]byte, bool, error) {
	if e.srv == nil {
		return e.GetCtx(farmem.Direct, key)
	}
	vs, ok, err := e.GetMany([][]byte{key})
	if err != nil {
		return nil, false, err
	}
	return vs[0], ok[0], nil
}

// cooperative is implemented by contexts that can yield (user-level threads).
type cooperative interface{ Cooperative() bool }

// blocker is implemented by contexts that can wait for a blocking call
// without holding their core (ult.Task.Block).
type blocker interface{ Block(fn func()) }

// rlock takes mu shared; a user-level thread yields while a writer holds it
// rather than blocking its whole core.
func (e *Engine) rlock(c farmem.Ctx) {
	if co, ok := c.(cooperative); ok && co.Cooperative() {
		for !e.mu.TryRLock() {
			e.m.lockWaits.Add(1)
			c.Yield()
		}
		return
	}
	e.mu.RLock()
}

// candidate is an entry a lookup must check.
type candidate struct {
	l    loc
	path string   // the segment's file, named by errors
	data []byte   // the entry, copied from the write buffer
	seg  *segment // pinned, when data is nil
}

// GetCtx is Get through c: on a user-level thread (a *ult.Task) the lookup
// prefetches each index bucket and yields before reading it, and yields
// around the SSD read, so other lookups run meanwhile.
func (e *Engine) GetCtx(c farmem.Ctx, key []byte) ([]byte, bool, error) {
	return e.lookup(c, key, false)
}

// Peek is Get without side effects (engine.Peeker): no reference in the
// eviction order, no read-cache fill, no counters.
func (e *Engine) Peek(key []byte) ([]byte, bool, error) {
	return e.lookup(farmem.Direct, key, true)
}

// lookup finds key; quiet leaves the eviction order, the read cache and
// the counters as they are.
func (e *Engine) lookup(c farmem.Ctx, key []byte, quiet bool) ([]byte, bool, error) {
	if e.closed.Load() {
		return nil, false, ErrClosed
	}
	h := e.hash(key)
	sig := sigOf(h)
	var lbuf [slotsPerBucket]loc
	var cands [slotsPerBucket]candidate
	deviceRead := false
restart:
	tbl := e.tbl.Load()
	b := h & tbl.mask
	for probe := uint64(0); probe <= tbl.mask; probe++ {
		p := tbl.bucketPtr(b)
		// Fetch the line (a user-level thread yields in Prefetch), then
		// take the lock and read it: a stall on a line that has not
		// arrived is spent outside the lock, so a writer never waits for
		// a far-memory load. (Access only accounts time; the bucket is
		// read below, under the lock.)
		c.Prefetch(p, farmem.LineSize)
		c.Access(p, farmem.LineSize)
		e.rlock(c)
		if e.tbl.Load() != tbl {
			e.mu.RUnlock()
			e.m.restarts.Add(1)
			goto restart
		}
		locs, end := candidates(tbl.bucket(b), sig, lbuf[:0])
		n := 0
		for _, l := range locs {
			s := e.segs[l.seg]
			if s == nil {
				continue
			}
			cands[n] = candidate{l: l, path: s.path}
			if data, ok := s.readBuffered(int64(l.off), int(l.n)); ok {
				cands[n].data = data
			} else {
				s.pin()
				cands[n].seg = s
				deviceRead = true
			}
			n++
		}
		e.mu.RUnlock()
		var val []byte
		found := false
		var err error
		for i := 0; i < n; i++ {
			cd := cands[i]
			if !found && err == nil {
				val, found, err = e.readCandidate(c, key, cd, quiet)
			}
			if cd.seg != nil {
				cd.seg.unpin()
			}
			cands[i] = candidate{}
		}
		if err != nil {
			return nil, false, err
		}
		if found {
			if e.pol != nil && !quiet {
				e.touch(c, key)
			}
			return val, true, nil
		}
		if end {
			if !deviceRead && !quiet {
				e.indexNegatives.Add(1)
			}
			return nil, false, nil
		}
		b = (b + 1) & tbl.mask
	}
	return nil, false, nil
}

// touch records a reference to key in the eviction order.
func (e *Engine) touch(c farmem.Ctx, key []byte) {
	e.rlock(c)
	if it, ok := e.tree.Get(&item{key: key}); ok && it.pol != nil {
		e.pmu.Lock()
		e.pol.touch(it.pol)
		e.pmu.Unlock()
	}
	e.mu.RUnlock()
}

// readCandidate returns the value of the entry at cd if it is key's.
// quiet: see lookup.
func (e *Engine) readCandidate(c farmem.Ctx, key []byte, cd candidate, quiet bool) ([]byte, bool, error) {
	if cd.data != nil {
		ent, err := checkEntry(cd.path, cd.l, cd.data, true)
		if err != nil {
			return nil, false, err
		}
		if !bytes.Equal(ent.key, key) {
			return nil, false, nil
		}
		if !quiet {
			e.m.bufferHits.Add(1)
		}
		return ent.value, true, nil
	}
	if e.cache != nil && !quiet {
		if k, v, ok := e.cache.get(c, cd.l); ok {
			if !bytes.Equal(k, key) {
				return nil, false, nil
			}
			e.m.cacheHits.Add(1)
			return append([]byte{}, v...), true, nil
		}
	}
	ent, err := e.readEntry(c, cd.seg, cd.l, quiet)
	if err != nil {
		return nil, false, err
	}
	if !bytes.Equal(ent.key, key) {
		return nil, false, nil
	}
	if e.cache != nil && !quiet {
		e.cache.put(cd.l, ent.key, ent.value)
	}
	return ent.value, true, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// readEntry reads and verifies the set entry at l of s from the file. The
// returned entry's slices are the caller's.
func (e *Engine) readEntry(c farmem.Ctx, s *segment, l loc, quiet bool) (entry, error) {
	if !quiet {
		e.m.diskReads.Add(1)
	}
	off, n := int64(l.off), int(l.n)
	var data []byte
	switch {
	case s.rf == nil:
		// Not the OS's files (an emulated device or a fault-injecting FS):
		// a plain read through the FS, which a serving user-level thread
		// hands to another goroutine and waits for without holding its
		// core.
		data = make([]byte, n)
		var got int
		var err error
		read := func() { got, err = s.wf.ReadAt(data, off) }
		if b, ok := c.(blocker); ok {
			b.Block(read)
		} else {
			read()
		}
		if got < n {
			return entry{}, readErr(s, off, err)
		}
	case s.rfDirect:
		const align = 4096
		start := off &^ (align - 1)
		end := (off + int64(n) + align - 1) &^ (align - 1)
		buf := alignedBuffer(int(end - start))
		got, err := c.ReadAt(s.rf, buf, start)
		if int64(got) < off+int64(n)-start {
			return entry{}, readErr(s, off, err)
		}
		data = buf[off-start : off-start+int64(n)]
	default:
		data = make([]byte, n)
		got, err := c.ReadAt(s.rf, data, off)
		if got < n {
			return entry{}, readErr(s, off, err)
		}
	}
	return checkEntry(s.path, l, data, false)
}

// checkEntry verifies data, the entry the index locates at l in the
// segment file path, read from the file or (buffered) copied from the
// write buffer: its checksum, that it fills exactly the index's length and
// that it is a set. Both sources are checked alike because the buffer is
// only a copy of the file kept by offset arithmetic: a copy at the wrong
// place (issue 8) must be reported, naming the segment and the offset, and
// never returned as a value.
func checkEntry(path string, l loc, data []byte, buffered bool) (entry, error) {
	ent, bad := parseEntry(data, true)
	switch {
	case bad != "":
	case ent.size != len(data):
		bad = fmt.Sprintf("entry of %d bytes where the index has %d", ent.size, len(data))
	case ent.kind != kindSet:
		bad = "index points at a deletion"
	}
	if bad != "" {
		if buffered {
			bad = "write buffer copy: " + bad
		}
		return entry{}, &CorruptionError{File: path, Offset: int64(l.off), Reason: bad}
	}
	ent.value = nonNil(ent.value)
	return ent, nil
}

func readErr(s *segment, off int64, err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return &CorruptionError{File: s.path, Offset: off, Reason: "entry past the end of the file"}
	}
	return fmt.Errorf("flash: read %s at %d: %w", s.path, off, err)
}

func alignedBuffer(size int) []byte {
	const align = 4096
	raw := make([]byte, size+align)
	off := 0
	if a := int(uintptrOf(raw) % align); a != 0 {
		off = align - a
	}
	return raw[off : off+size : off+size]
}

// Scan implements engine.Engine. It reads the tree directly (DRAM), also
// with far memory, since fn may block: ScanServed is the far-memory scan.
func (e *Engine) Scan(begin, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	return e.scan(farmem.Direct, begin, end, reverse, fn)
}

// scan is Scan through c: with a far-memory c each key visited is read
// from far memory and values through c's reads.
func (e *Engine) scan(c farmem.Ctx, begin, end []byte, reverse bool, fn func(key, value []byte) bool) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if end != nil && bytes.Compare(begin, end) >= 0 {
		return nil
	}
	far := c != farmem.Direct
	e.rlock(c)
	e.cloneMu.Lock()
	snap := e.tree.Clone()
	e.cloneMu.Unlock()
	pinned := make(map[uint32]*segment, len(e.segs))
	for id, s := range e.segs {
		s.pin()
		pinned[id] = s
	}
	e.mu.RUnlock()
	defer func() {
		for _, s := range pinned {
			s.unpin()
		}
	}()
	var err error
	visit := func(it *item) bool {
		if far {
			touchItem(c, it)
		}
		var v []byte
		v, err = e.valueOf(c, pinned[it.loc.seg], it)
		if err != nil {
			return false
		}
		return fn(it.key, v)
	}
	lo := &item{key: begin}
	switch {
	case !reverse && end != nil:
		snap.AscendRange(lo, &item{key: end}, visit)
	case !reverse:
		snap.AscendGreaterOrEqual(lo, visit)
	case end != nil:
		snap.DescendLessOrEqual(&item{key: end}, func(it *item) bool {
			if bytes.Equal(it.key, end) {
				return true
			}
			if bytes.Compare(it.key, begin) < 0 {
				return false
			}
			return visit(it)
		})
	default:
		snap.Descend(func(it *item) bool {
			if bytes.Compare(it.key, begin) < 0 {
				return false
			}
			return visit(it)
		})
	}
	return err
}

// valueOf reads the value of the tree item it, whose segment s is pinned.
func (e *Engine) valueOf(c farmem.Ctx, s *segment, it *item) ([]byte, error) {
	if s == nil {
		return nil, fmt.Errorf("flash: key %q points at missing segment %d", it.key, it.loc.seg)
	}
	e.rlock(c)
	data, buffered := s.readBuffered(int64(it.loc.off), int(it.loc.n))
	e.mu.RUnlock()
	var ent entry
	var err error
	if buffered {
		ent, err = checkEntry(s.path, it.loc, data, true)
	} else {
		if e.cache != nil {
			if k, v, ok := e.cache.get(farmem.Direct, it.loc); ok && bytes.Equal(k, it.key) {
				return append([]byte{}, v...), nil
			}
		}
		ent, err = e.readEntry(c, s, it.loc, false)
	}
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(ent.key, it.key) {
		return nil, &CorruptionError{File: s.path, Offset: int64(it.loc.off), Reason: "entry holds another key"}
	}
	return ent.value, nil
}

// Apply implements engine.Engine. Concurrent calls are committed together.
func (e *Engine) Apply(b *engine.Batch) error {
	if e.closed.Load() {
		return ErrClosed
	}
	for _, w := range b.Writes {
		if len(w.Key) > maxKeyLen || (w.IsClearRange() && len(w.End) > maxKeyLen) {
			return fmt.Errorf("flash: key of %d bytes is too long", len(w.Key))
		}
		if int64(len(w.Value)) > 1<<30 {
			return fmt.Errorf("flash: value of %d bytes is too long", len(w.Value))
		}
	}
	req := &commitReq{b: b, done: make(chan struct{})}
	e.qmu.Lock()
	e.queue = append(e.queue, req)
	if e.leading {
		e.qmu.Unlock()
		<-req.done
		return req.err
	}
	e.leading = true
	for len(e.queue) > 0 {
		group := e.queue
		e.queue = nil
		e.qmu.Unlock()
		err := e.commit(group)
		for _, r := range group {
			r.err = err
			close(r.done)
		}
		e.qmu.Lock()
	}
	e.leading = false
	e.qmu.Unlock()
	<-req.done
	return req.err
}

// change is the net effect of a group on one key.
type change struct {
	live  bool
	value []byte
	cost  uint32
}

// commit writes one frame for a group of batches and applies it.
func (e *Engine) commit(group []*commitReq) error {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if e.closed.Load() {
		return ErrClosed
	}
	if e.failed != nil {
		return e.failed
	}
	changes := make(map[string]*change)
	var order []string
	mark := func(k string, c change) {
		if old, ok := changes[k]; ok {
			*old = c
			return
		}
		cc := c
		changes[k] = &cc
		order = append(order, k)
	}
	version := e.version.Load()
	for _, r := range group {
		for _, w := range r.b.Writes {
			switch {
			case w.IsClearRange():
				if bytes.Compare(w.Key, w.End) >= 0 {
					continue
				}
				e.tree.AscendRange(&item{key: w.Key}, &item{key: w.End}, func(it *item) bool {
					mark(string(it.key), change{})
					return true
				})
				lo, hi := string(w.Key), string(w.End)
				for k, c := range changes {
					if c.live && k >= lo && k < hi {
						*c = change{}
					}
				}
			case w.IsClear():
				mark(string(w.Key), change{})
			default:
				if e.capacity > 0 && int64(len(w.Key)+len(w.Value)) > e.capacity {
					mark(string(w.Key), change{}) // can never fit: reads absent
					continue
				}
				mark(string(w.Key), change{live: true, value: w.Value, cost: w.Cost})
			}
		}
		version = int64(r.b.Version)
	}

	// Encode the frame: one entry per key whose state changes on disk.
	payload := make([]byte, frameHeaderSize, frameHeaderSize+64*len(order))
	type placed struct {
		key  string
		kind uint8
		off  int // in the frame
		n    int
		vlen int
		cost uint32
	}
	ents := make([]placed, 0, len(order))
	for _, k := range order {
		c := changes[k]
		if c.live {
			ents = append(ents, placed{key: k, kind: kindSet, off: len(payload), n: entrySize(len(k), len(c.value)), vlen: len(c.value), cost: c.cost})
			payload = appendEntry(payload, kindSet, []byte(k), c.value, c.cost)
			continue
		}
		if _, ok := e.tree.Get(&item{key: []byte(k)}); !ok {
			continue // absent before and after
		}
		ents = append(ents, placed{key: k, kind: kindDelete, off: len(payload), n: entrySize(len(k), 0)})
		if e.durable {
			payload = appendEntry(payload, kindDelete, []byte(k), nil, 0)
		}
	}
	count := 0
	for _, p := range ents {
		if p.kind == kindSet || e.durable {
			count++
		}
	}

	var s *segment
	var off int64
	if count > 0 || e.durable {
		var err error
		s, off, err = e.writeFrame(payload, uint32(count), version, 0)
		if err != nil {
			return err
		}
		e.m.commits.Add(1)
	}
	e.m.batches.Add(int64(len(group)))

	e.mu.Lock()
	for _, p := range ents {
		k := []byte(p.key)
		if p.kind == kindSet {
			l := loc{seg: s.id, off: uint32(off) + uint32(p.off), n: uint32(p.n)}
			e.setLocked(k, e.hash(k), l, uint32(p.vlen), p.cost, true)
			if s.keys != nil {
				s.keys.Add(k)
			}
		} else {
			e.deleteLocked(k)
		}
	}
	if e.capacity > 0 {
		for e.bytes.Load() > e.capacity {
			n := e.pol.evict()
			if n == nil {
				break
			}
			e.deleteLocked(n.key)
			e.evictions.Add(1)
		}
	}
	e.version.Store(version)
	e.mu.Unlock()
	e.maybeKickGC()
	return nil
}

// writeFrame appends a frame with payload (whose first frameHeaderSize
// bytes are reserved for the header) to the active segment, syncs it when
// durable and copies it into the write buffer. It returns the segment and
// the frame's offset; the caller publishes the frame's entries (under mu)
// and the new size is published here. The caller holds wmu.
func (e *Engine) writeFrame(payload []byte, count uint32, version int64, flags uint32) (*segment, int64, error) {
	frameLen := int64(len(payload))
	if e.active.size+frameLen > e.cfg.SegmentBytes && e.active.size > segHeaderSize {
		if err := e.rotate(); err != nil {
			e.failed = err
			return nil, 0, err
		}
	}
	s := e.active
	off := s.size
	putFrameHeader(payload, frameHeader{
		plen:    uint32(len(payload) - frameHeaderSize),
		pcrc:    crc(payload[frameHeaderSize:]),
		lsn:     e.nextLSN,
		version: version,
		count:   count,
		flags:   flags,
	})
	if _, err := s.wf.WriteAt(payload, off); err != nil {
		// A write that failed may have written part of the frame: the
		// engine stops writing (e.failed), and recovery drops the torn
		// tail.
		e.failed = fmt.Errorf("flash: write %s: %w", s.path, err)
		return nil, 0, e.failed
	}
	if e.durable {
		if err := datasync(s.wf); err != nil {
			e.failed = fmt.Errorf("flash: sync %s: %w", s.path, err)
			return nil, 0, e.failed
		}
	}
	e.nextLSN++
	fresh := e.fillBuffer(s, off, payload)
	e.mu.Lock()
	s.extend(payload)
	s.wb = append(s.wb, fresh...)
	for i, ch := range fresh {
		if ch != nil {
			e.wbList = append(e.wbList, wbChunk{s: s, idx: len(s.wb) - len(fresh) + i})
			e.wbBytes += chunkSize
		}
	}
	for e.wbBytes > e.cfg.WriteBufferBytes && len(e.wbList) > 0 {
		c := e.wbList[0]
		e.wbList = e.wbList[1:]
		if c.idx < len(c.s.wb) {
			c.s.wb[c.idx] = nil
		}
		e.wbBytes -= chunkSize
	}
	s.size = off + frameLen
	e.mu.Unlock()
	return s, off, nil
}

// fillBuffer copies a frame written at off into s's write buffer: into the
// chunks it already has (their bytes past s.size, which no reader looks
// at) and into new chunks it returns for the caller to append to s.wb.
//
// s.wb[i] must hold bytes [i*chunkSize, (i+1)*chunkSize) of the segment,
// so fresh[j] is chunk len(s.wb)+j. The buffer can be shorter than the
// segment: a segment recovered at Open becomes the active one with an
// empty buffer while already holding data (issue 8). The chunks between
// the buffer's end and the frame's first chunk are then nil (read from
// the file); appending the frame's chunks right after the buffer's end
// instead put them at the wrong positions, and reads of both old and new
// entries were served from the wrong bytes.
func (e *Engine) fillBuffer(s *segment, off int64, frame []byte) []*chunk {
	if e.cfg.WriteBufferBytes <= 0 {
		return nil
	}
	e.mu.RLock()
	have := s.wb
	e.mu.RUnlock()
	var fresh []*chunk
	for c := int64(len(have)); c < off/chunkSize; c++ {
		fresh = append(fresh, nil)
	}
	end := off + int64(len(frame))
	for c := off / chunkSize; c*chunkSize < end; c++ {
		var ch *chunk
		switch {
		case c < int64(len(have)):
			ch = have[c]
			if ch == nil {
				continue // dropped: those bytes are read from the file
			}
		case c*chunkSize < off && !(c == 0 && off <= segHeaderSize):
			// The chunk would start with bytes written before this
			// buffer held the segment (after recovery): leave it out.
			fresh = append(fresh, nil)
			continue
		default:
			ch = new(chunk)
			fresh = append(fresh, ch)
		}
		lo := max(off, c*chunkSize)
		hi := min(end, (c+1)*chunkSize)
		copy(ch[lo-c*chunkSize:hi-c*chunkSize], frame[lo-off:hi-off])
	}
	return fresh
}

// setLocked points key at l, inserting it if new. The caller holds mu.
func (e *Engine) setLocked(key []byte, h uint64, l loc, vlen, cost uint32, use bool) {
	it := &item{key: key, h: h, loc: l, vlen: vlen}
	if old, ok := e.tree.Get(it); ok {
		e.tbl.Load().update(h, old.loc, l)
		e.deadLocked(old.loc)
		e.bytes.Add(it.size() - old.size())
		it.pol = old.pol
		if it.pol != nil && use {
			e.pmu.Lock()
			e.pol.remove(it.pol)
			it.pol.size, it.pol.cost = it.size(), cost
			e.pol.add(it.pol)
			e.pmu.Unlock()
		}
	} else {
		tbl := e.tbl.Load()
		if tbl.full() {
			tbl = e.rebuildLocked()
		}
		tbl.insert(h, l)
		e.keys.Add(1)
		e.bytes.Add(it.size())
		if e.pol != nil {
			it.pol = &pnode{key: key, size: it.size(), cost: cost}
			e.pmu.Lock()
			e.pol.add(it.pol)
			e.pmu.Unlock()
		}
	}
	e.tree.ReplaceOrInsert(it)
	if s := e.segs[l.seg]; s != nil {
		s.live += int64(pad8(int(l.n)))
	}
}

// deleteLocked removes key if present. The caller holds mu.
func (e *Engine) deleteLocked(key []byte) {
	old, ok := e.tree.Delete(&item{key: key})
	if !ok {
		return
	}
	e.tbl.Load().remove(old.h, old.loc)
	e.deadLocked(old.loc)
	e.keys.Add(-1)
	e.bytes.Add(-old.size())
	if old.pol != nil {
		e.pmu.Lock()
		e.pol.remove(old.pol)
		e.pmu.Unlock()
	}
}

// deadLocked accounts the entry at l as garbage.
func (e *Engine) deadLocked(l loc) {
	if s := e.segs[l.seg]; s != nil {
		n := int64(pad8(int(l.n)))
		s.live -= n
		if s != e.active {
			e.deadKick += n
		}
	}
}

// rebuildLocked replaces the hash index by one sized for the live keys,
// dropping deleted slots. The caller holds mu.
func (e *Engine) rebuildLocked() *table {
	old := e.tbl.Load()
	buckets := old.buckets()
	if float64(old.live+1) > maxLoad/2*float64(buckets*slotsPerBucket) {
		buckets *= 2
	}
	t := newTable(buckets)
	e.tree.Ascend(func(it *item) bool {
		t.insert(it.h, it.loc)
		return true
	})
	e.tbl.Store(t)
	return t
}

// Coldest implements engine.RecencyOrdered: up to n keys, next to be
// evicted first; nil unless the engine is ephemeral with a capacity.
func (e *Engine) Coldest(n int) [][]byte {
	if e.pol == nil || n <= 0 || e.closed.Load() {
		return nil
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	e.pmu.Lock()
	defer e.pmu.Unlock()
	out := make([][]byte, 0, min(n, int(e.keys.Load())))
	e.pol.coldest(func(p *pnode) bool {
		out = append(out, append([]byte(nil), p.key...))
		return len(out) < n
	})
	return out
}

// Close implements engine.Engine. A durable engine's data is already on
// disk; an ephemeral engine's files are removed.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	if e.srv != nil {
		e.srv.Close() // lets the lookups in progress finish
	}
	close(e.gcStop)
	<-e.gcDone
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	e.wmu.Lock()
	defer e.wmu.Unlock()
	e.closeFiles()
	if e.ephemeral {
		e.mu.Lock()
		for _, s := range e.segs {
			e.fs.Remove(s.path)
		}
		e.mu.Unlock()
	}
	if e.lockFile != nil {
		e.lockFile.Close()
	}
	return nil
}

func (e *Engine) closeFiles() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.segs {
		s.closeFiles()
	}
	for _, s := range e.zombies {
		s.closeFiles()
		if !e.keepFiles.Load() {
			e.fs.Remove(s.path)
		}
	}
	e.zombies = nil
}
