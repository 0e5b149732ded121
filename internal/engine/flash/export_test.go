package flash

import "bytes"

// Crash ends e the way a kill -9 of its process between two Applys would,
// so that the same test process can recover its directory (a real kill is
// TestCrashKill's): the cleaner is stopped, every file is closed as it
// stands — cleaned segments whose files were not deleted yet stay, and so
// do an ephemeral engine's files — and the directory lock is released, none
// of which Close's orderly path would leave. With torn > 0 the first torn
// bytes of a frame that was being written when the process died are
// appended to the active segment (never the whole frame: its group commit
// was not acknowledged, so recovery must drop it). e is unusable after.
func Crash(e *Engine, torn int) error {
	if e.closed.Swap(true) {
		return ErrClosed
	}
	close(e.gcStop)
	<-e.gcDone
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	e.wmu.Lock()
	defer e.wmu.Unlock()
	var err error
	if torn > 0 && e.active != nil {
		frame := appendEntry(make([]byte, frameHeaderSize), kindSet, []byte("torn"), bytes.Repeat([]byte{'t'}, torn), 0)
		putFrameHeader(frame, frameHeader{
			plen:    uint32(len(frame) - frameHeaderSize),
			pcrc:    crc(frame[frameHeaderSize:]),
			lsn:     e.nextLSN,
			version: e.version.Load() + 1,
			count:   1,
		})
		_, err = e.active.wf.WriteAt(frame[:min(torn, len(frame)-1)], e.active.size)
	}
	e.mu.Lock()
	for _, s := range e.segs {
		s.closeFiles()
	}
	for _, s := range e.zombies {
		s.closeFiles()
	}
	e.mu.Unlock()
	e.lockFile.Close()
	return err
}
