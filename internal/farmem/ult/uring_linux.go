//go:build linux

package ult

import (
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// A minimal io_uring: one submission per read (one io_uring_enter), and
// completions reaped from the shared completion ring without a system call.
// Only IORING_OP_READ is used. Layouts follow include/uapi/linux/io_uring.h.

const (
	sysIOUringSetup = 425
	sysIOUringEnter = 426

	ioringOffSQRing = 0
	ioringOffCQRing = 0x8000000
	ioringOffSQEs   = 0x10000000

	ioringFeatSingleMmap = 1 << 0
	ioringOpRead         = 22
)

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

type uringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	rwFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFdIn  int32
	addr3       uint64
	pad         uint64
}

type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

type uring struct {
	fd             int
	sqMem, cqMem   []byte
	sqeMem         []byte
	sqHead, sqTail *uint32
	sqMask         uint32
	sqEntries      uint32
	sqArray        unsafe.Pointer
	sqes           unsafe.Pointer
	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           unsafe.Pointer

	inflight []*ioReq // by slot, the request's user_data
	free     []uint32
}

func newUring(depth int) (*uring, error) {
	var p uringParams
	fd, _, errno := syscall.Syscall(sysIOUringSetup, uintptr(depth), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("ult: io_uring_setup: %w", errno)
	}
	u := &uring{fd: int(fd)}
	fail := func(err error) (*uring, error) {
		u.close()
		return nil, err
	}
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))
	single := p.features&ioringFeatSingleMmap != 0
	if single && cqSize > sqSize {
		sqSize = cqSize
	}
	var err error
	u.sqMem, err = syscall.Mmap(u.fd, ioringOffSQRing, sqSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return fail(fmt.Errorf("ult: mmap io_uring SQ: %w", err))
	}
	if single {
		u.cqMem = u.sqMem
	} else {
		u.cqMem, err = syscall.Mmap(u.fd, ioringOffCQRing, cqSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
		if err != nil {
			return fail(fmt.Errorf("ult: mmap io_uring CQ: %w", err))
		}
	}
	u.sqeMem, err = syscall.Mmap(u.fd, ioringOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(uringSQE{})), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return fail(fmt.Errorf("ult: mmap io_uring SQEs: %w", err))
	}
	sq := unsafe.Pointer(&u.sqMem[0])
	cq := unsafe.Pointer(&u.cqMem[0])
	u.sqHead = (*uint32)(unsafe.Add(sq, p.sqOff.head))
	u.sqTail = (*uint32)(unsafe.Add(sq, p.sqOff.tail))
	u.sqMask = *(*uint32)(unsafe.Add(sq, p.sqOff.ringMask))
	u.sqEntries = p.sqEntries
	u.sqArray = unsafe.Add(sq, p.sqOff.array)
	u.sqes = unsafe.Pointer(&u.sqeMem[0])
	u.cqHead = (*uint32)(unsafe.Add(cq, p.cqOff.head))
	u.cqTail = (*uint32)(unsafe.Add(cq, p.cqOff.tail))
	u.cqMask = *(*uint32)(unsafe.Add(cq, p.cqOff.ringMask))
	u.cqes = unsafe.Add(cq, p.cqOff.cqes)
	u.inflight = make([]*ioReq, p.sqEntries)
	for i := int(p.sqEntries) - 1; i >= 0; i-- {
		u.free = append(u.free, uint32(i))
	}
	return u, nil
}

func (u *uring) submit(r *ioReq) error {
	if len(u.free) == 0 {
		return errQueueFull
	}
	if len(r.buf) == 0 {
		r.done = true
		return nil
	}
	slot := u.free[len(u.free)-1]
	u.free = u.free[:len(u.free)-1]
	u.inflight[slot] = r

	tail := atomic.LoadUint32(u.sqTail)
	idx := tail & u.sqMask
	sqe := (*uringSQE)(unsafe.Add(u.sqes, uintptr(idx)*unsafe.Sizeof(uringSQE{})))
	*sqe = uringSQE{
		opcode:   ioringOpRead,
		fd:       int32(r.f.Fd()),
		off:      uint64(r.off),
		addr:     uint64(uintptr(unsafe.Pointer(&r.buf[0]))),
		len:      uint32(len(r.buf)),
		userData: uint64(slot),
	}
	*(*uint32)(unsafe.Add(u.sqArray, uintptr(idx)*4)) = idx
	atomic.StoreUint32(u.sqTail, tail+1)
	for {
		_, _, errno := syscall.Syscall6(sysIOUringEnter, uintptr(u.fd), 1, 0, 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			// The entry stays queued; the next enter would submit it, but
			// report the failure and give the slot back.
			atomic.StoreUint32(u.sqTail, tail)
			u.inflight[slot] = nil
			u.free = append(u.free, slot)
			return fmt.Errorf("ult: io_uring_enter: %w", errno)
		}
		return nil
	}
}

func (u *uring) poll() {
	head := atomic.LoadUint32(u.cqHead)
	tail := atomic.LoadUint32(u.cqTail)
	if head == tail {
		return
	}
	for ; head != tail; head++ {
		cqe := (*uringCQE)(unsafe.Add(u.cqes, uintptr(head&u.cqMask)*unsafe.Sizeof(uringCQE{})))
		slot := uint32(cqe.userData)
		r := u.inflight[slot]
		u.inflight[slot] = nil
		u.free = append(u.free, slot)
		if r == nil {
			continue
		}
		switch {
		case cqe.res < 0:
			r.n, r.err = 0, fmt.Errorf("ult: read at %d: %w", r.off, syscall.Errno(-cqe.res))
		case int(cqe.res) < len(r.buf):
			r.n, r.err = int(cqe.res), io.EOF
		default:
			r.n, r.err = int(cqe.res), nil
		}
		r.done = true
	}
	atomic.StoreUint32(u.cqHead, head)
}

func (u *uring) close() error {
	// Wait for reads in flight: their buffers must not be reused while the
	// kernel may still write them.
	for pending := len(u.inflight) - len(u.free); pending > 0 && u.cqHead != nil; pending = len(u.inflight) - len(u.free) {
		syscall.Syscall6(sysIOUringEnter, uintptr(u.fd), 0, 1, 1, 0, 0) // IORING_ENTER_GETEVENTS
		u.poll()
	}
	shared := len(u.cqMem) > 0 && len(u.sqMem) > 0 && &u.cqMem[0] == &u.sqMem[0]
	if u.sqeMem != nil {
		syscall.Munmap(u.sqeMem)
	}
	if u.cqMem != nil && !shared {
		syscall.Munmap(u.cqMem)
	}
	if u.sqMem != nil {
		syscall.Munmap(u.sqMem)
	}
	u.sqeMem, u.cqMem, u.sqMem = nil, nil, nil
	if u.fd > 0 {
		syscall.Close(u.fd)
		u.fd = -1
	}
	return nil
}

func (u *uring) mode() IOMode { return IOUring }
