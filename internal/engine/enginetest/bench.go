package enginetest

import (
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/distash/distash/internal/engine"
	"github.com/distash/distash/internal/kv"
)

// benchKey writes the 16-byte benchmark key for i into buf.
func benchKey(buf []byte, i int) []byte {
	copy(buf, "bench/")
	binary.BigEndian.PutUint64(buf[8:], uint64(i))
	return buf[:16]
}

// BenchmarkApply applies b.N single-key batches (16-byte keys, 100-byte
// values, over a key space of 100,000 keys so that some are overwrites) to e.
func BenchmarkApply(b *testing.B, e engine.Engine) {
	key := make([]byte, 16)
	val := make([]byte, 100)
	batch := &engine.Batch{Writes: make([]engine.Write, 1)}
	b.SetBytes(int64(len(key) + len(val)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		binary.BigEndian.PutUint64(val, uint64(i))
		batch.Version = kv.Version(i + 1)
		batch.Writes[0] = engine.Write{Key: benchKey(key, (i*7919)%100_000), Value: val}
		if err := e.Apply(batch); err != nil {
			b.Fatal(err)
		}
	}
}

// benchGetKeys is how many pairs the Get benchmarks load.
const benchGetKeys = 10_000

// loadGetKeys writes the Get benchmarks' pairs: benchGetKeys 16-byte keys
// with 100-byte values.
func loadGetKeys(b *testing.B, e engine.Engine) {
	val := make([]byte, 100)
	batch := &engine.Batch{Version: 1}
	for i := 0; i < benchGetKeys; i++ {
		batch.Writes = append(batch.Writes, engine.Write{Key: benchKey(make([]byte, 16), i), Value: val})
	}
	if err := e.Apply(batch); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkGet loads 10,000 pairs (16-byte keys, 100-byte values) into e
// and then measures b.N Gets of present keys.
func BenchmarkGet(b *testing.B, e engine.Engine) {
	const n = benchGetKeys
	loadGetKeys(b, e)
	key := make([]byte, 16)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, ok, err := e.Get(benchKey(key, (i*7919)%n))
		if err != nil || !ok {
			b.Fatalf("Get: %v, %v", ok, err)
		}
	}
}

// BenchmarkGetParallel measures Get of 10,000 keys from GOMAXPROCS×16
// goroutines at once (b.SetParallelism): how reads of one engine scale
// when many clients read it, as a stash's readers do.
func BenchmarkGetParallel(b *testing.B, e engine.Engine) {
	const n = benchGetKeys
	loadGetKeys(b, e)
	b.SetParallelism(16)
	b.ResetTimer()
	var seed atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		key := make([]byte, 16)
		i := int(seed.Add(1)) * 7919
		for pb.Next() {
			i++
			_, ok, err := e.Get(benchKey(key, (i*7919)%n))
			if err != nil || !ok {
				b.Errorf("Get: %v, %v", ok, err)
				return
			}
		}
	})
}
