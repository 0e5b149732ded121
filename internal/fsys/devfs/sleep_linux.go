//go:build linux

package devfs

import (
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// timers are timerfds registered with Go's network poller: a goroutine
// reading one is parked, holding no OS thread and no P, and is woken when
// the kernel's high-resolution timer fires. (Go's own timers wake with
// about 1 ms granularity here; a raw nanosleep keeps its P until the
// runtime's monitor takes it back, up to 10 ms later, which on 2 cores
// stalls the goroutines that would issue the next I/Os.)
var timers = sync.Pool{New: func() any {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "devfs-timer")
}}

// sleep blocks the calling goroutine for about d nanoseconds.
func sleep(d int64) {
	f, _ := timers.Get().(*os.File)
	if f == nil {
		ts := syscall.NsecToTimespec(d)
		syscall.Nanosleep(&ts, nil)
		return
	}
	rc, err := f.SyscallConn()
	if err == nil {
		its := unix.ItimerSpec{Value: unix.NsecToTimespec(d)}
		cerr := rc.Control(func(fd uintptr) { err = unix.TimerfdSettime(int(fd), 0, &its, nil) })
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		f.Close()
		ts := syscall.NsecToTimespec(d)
		syscall.Nanosleep(&ts, nil)
		return
	}
	var buf [8]byte
	if _, err := f.Read(buf[:]); err != nil {
		f.Close()
		return
	}
	timers.Put(f)
}
