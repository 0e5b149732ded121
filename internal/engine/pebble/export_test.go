package pebbleengine

// Checkpoint writes a checkpoint of e's database to dir (which must not
// exist). Pebble copies the WAL files of the memtables not yet flushed as
// they stand rather than flushing them, so opening the checkpoint replays
// them: it is the state a crash at that moment would recover from,
// without the directory lock that keeps the test from reopening e's own
// directory before closing it.
func Checkpoint(e *Engine, dir string) error { return e.db.Checkpoint(dir) }

// Flush flushes e's memtables to sstables.
func Flush(e *Engine) error { return e.db.Flush() }

// Apart runs fn as e runs its calls that take Pebble's lock (apart).
func Apart(e *Engine, fn func()) error { return e.apart(fn) }

// Fail fails e for good with err, as a fatal error in Pebble does.
func Fail(e *Engine, err error) { e.guard.Fail(err) }
