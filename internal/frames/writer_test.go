package frames

import (
	"bufio"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"unsafe"
)

// TestWriterKeepsFramesOfHugeBatches: senders queue frames while a flush
// writes batches of more than 1 MiB (large commits from many clients).
// Every frame arrives whole: none is overwritten by frames queued during
// the write of the batch it is in. (A huge batch's buffer is not kept as
// the spare; the spare handed out as the queue once came back as the queue
// of the next batch while that batch was written.)
func TestWriterKeepsFramesOfHugeBatches(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	w := newWriter(client, 0)
	const senders, perSender = 8, 40
	// Mostly small frames, some over 1 MiB: a huge batch, then small ones.
	size := func(id int) int {
		if id%7 == 0 {
			return 1200 << 10
		}
		return 1 << 10
	}
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				// A body tells which frame it is, in its head and in
				// every byte after.
				body := make([]byte, size(g*perSender+i))
				binary.BigEndian.PutUint32(body, uint32(g*perSender+i))
				for j := 4; j < len(body); j++ {
					body[j] = byte(g*perSender + i)
				}
				if err := w.sendRaw(TypeMsg, body); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	r := bufio.NewReader(server)
	seen := map[uint32]bool{}
	var buf []byte
	for range senders * perSender {
		typ, body, err := ReadFrame(r, buf, MaxFrame)
		if err != nil {
			t.Fatalf("after %d frames: %v", len(seen), err)
		}
		if typ != TypeMsg || len(body) < 4 {
			t.Fatalf("frame %d: type %d, %d bytes", len(seen), typ, len(body))
		}
		id := binary.BigEndian.Uint32(body)
		if id < senders*perSender && len(body) != size(int(id)) {
			t.Fatalf("frame %d: %d bytes, want %d: overwritten in flight", id, len(body), size(int(id)))
		}
		if seen[id] || id >= senders*perSender {
			t.Fatalf("frame id %d twice or out of range: a frame was overwritten", id)
		}
		for j := 4; j < len(body); j++ {
			if body[j] != byte(id) {
				t.Fatalf("frame %d: byte %d is %d, want %d: overwritten in flight", id, j, body[j], byte(id))
			}
		}
		seen[id] = true
		buf = body
	}
	wg.Wait()
}

// TestWriterSpareNeverIsTheQueue: after a batch of more than 1 MiB (whose
// buffer is not kept), the queue and the spare buffer must not share an
// array, or the next flush writes the queue while senders append to it.
func TestWriterSpareNeverIsTheQueue(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	go func() { // drain
		r := bufio.NewReader(server)
		for {
			if _, _, err := ReadFrame(r, nil, MaxFrame); err != nil {
				return
			}
		}
	}()
	w := newWriter(client, 0)
	for i, n := range []int{1 << 10, 2 << 20, 1 << 10, 1 << 10, 2 << 20, 512} {
		if err := w.sendRaw(TypeMsg, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		shared := cap(w.buf) > 0 && cap(w.spare) > 0 && unsafe.SliceData(w.buf[:1]) == unsafe.SliceData(w.spare[:1])
		w.mu.Unlock()
		if shared {
			t.Fatalf("after frame %d (%d bytes) the queue and the spare buffer share an array", i, n)
		}
	}
}
