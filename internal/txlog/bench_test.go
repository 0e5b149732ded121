package txlog

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/distash/distash/internal/fsys"
	"github.com/distash/distash/internal/kv"
	"github.com/distash/distash/internal/logentry"
)

// BenchmarkAppendPipelined appends entries of 64 mutations of about 100
// bytes (20-byte key, 80-byte value, two tags of six) with up to 4096
// appends in flight, popping as it goes so memory stays bounded.
func BenchmarkAppendPipelined(b *testing.B) {
	const mutsPerEntry = 64
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			tags := []kv.Tag{0, 1, 2, 3, 4, 5}
			l := openLog(b, testOptions(b.TempDir(), replicas, tags...))
			defer l.Close()
			muts := make([]logentry.TaggedMutation, mutsPerEntry)
			for i := range muts {
				muts[i] = logentry.TaggedMutation{
					Mutation: kv.Mutation{Type: kv.MutSet, Key: fmt.Appendf(nil, "key-%016d", i), Param: make([]byte, 80)},
					Tags:     []kv.Tag{kv.Tag(i % 6), kv.Tag((i + 1) % 6)},
				}
			}
			ctx := context.Background()
			window := make([]*logentry.Future, 0, 4096)
			wait := func(f *logentry.Future) {
				if err := f.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				if f.Version()%1000 == 0 {
					for _, t := range tags {
						l.Pop(t, f.Version())
					}
				}
			}
			v := l.LastVersion()
			b.SetBytes(mutsPerEntry * 100)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if len(window) == cap(window) {
					wait(window[0])
					window = append(window[:0], window[1:]...)
				}
				window = append(window, l.Append(&logentry.Entry{Version: v + 1, PrevVersion: v, Mutations: muts}))
				v++
			}
			for _, f := range window {
				wait(f)
			}
			el := time.Since(start).Seconds()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el, "entries/s")
			b.ReportMetric(float64(b.N*mutsPerEntry)/el, "mutations/s")
		})
	}
}

// BenchmarkSpill measures a state machine holding 64 MiB of entries
// (256 mutations of 1 KiB each, to tags 1 and 2) for a tag that does not
// pop, kept in memory or spilled to files past 8 MiB: apply is what each
// entry costs to take in (spilling writes it out), catch-up what a
// returning stash's peeks of 4 MiB cost to read it all back. Figures are
// MB/s of entry bytes.
func BenchmarkSpill(b *testing.B) {
	const entries, perEntry = 256, 256
	raws := make([][]byte, entries)
	for i := range raws {
		e := &logentry.Entry{Version: kv.Version(i + 1), PrevVersion: kv.Version(i)}
		for j := range perEntry {
			e.Mutations = append(e.Mutations, logentry.TaggedMutation{
				Mutation: kv.Mutation{Type: kv.MutSet, Key: fmt.Appendf(nil, "key-%08d-%04d", i, j), Param: make([]byte, 1<<10)},
				Tags:     []kv.Tag{1, 2},
			})
		}
		raws[i] = encodeEntry(e)
	}
	total := 0
	for _, r := range raws {
		total += len(r)
	}
	fill := func(b *testing.B, spill bool) *fsm {
		f := newFSM(0, discardLogger(), func() {})
		if spill {
			cfg, err := newSpillConfig(fsys.Default, b.TempDir(), (8<<20)/SpillFactor)
			if err != nil {
				b.Fatal(err)
			}
			f.startSpill(cfg)
			b.Cleanup(f.closeSpill)
		}
		for _, r := range raws {
			f.mu.Lock()
			if err := f.applyLocked(r); err != nil {
				b.Fatal(err)
			}
			f.mu.Unlock()
		}
		return f
	}
	for _, spill := range []bool{false, true} {
		name := map[bool]string{false: "memory", true: "spilled"}[spill]
		b.Run("apply/"+name, func(b *testing.B) {
			b.SetBytes(int64(total))
			for range b.N {
				f := fill(b, spill)
				f.closeSpill()
			}
		})
		b.Run("catchup/"+name, func(b *testing.B) {
			f := fill(b, spill)
			if spill && f.state().Spilled == 0 {
				b.Fatal("nothing spilled")
			}
			b.SetBytes(int64(total))
			b.ResetTimer()
			for range b.N {
				n := 0
				for after := kv.Version(0); after < entries; {
					msgs, end, err := f.peek(2, after, 4<<20)
					if err != nil {
						b.Fatal(err)
					}
					n += len(msgs)
					after = end
				}
				if n != entries {
					b.Fatalf("caught up %d messages of %d", n, entries)
				}
			}
		})
	}
}

// BenchmarkAppendWhileHolding measures the latency of one append at a
// time (submitted, committed by raft, applied) on a one-replica log of
// 16 MiB memory budget, entries of 16 mutations of 1 KiB to tags 1 and 2:
// "popping" with both tags popping as they go, "spilling" with tag 2 (a
// stash that is down) never popping, 48 MiB already held and more spilled
// 8 MiB at a time while the appends run (the apply that spills holds the
// state machine's lock, as in production). Reports p50, p99 and the
// slowest in µs.
func BenchmarkAppendWhileHolding(b *testing.B) {
	muts := make([]logentry.TaggedMutation, 16)
	for i := range muts {
		muts[i] = logentry.TaggedMutation{Mutation: kv.Mutation{Type: kv.MutSet, Key: fmt.Appendf(nil, "key-%04d", i), Param: make([]byte, 1<<10)}, Tags: []kv.Tag{1, 2}}
	}
	for _, held := range []bool{false, true} {
		b.Run(map[bool]string{false: "popping", true: "spilling"}[held], func(b *testing.B) {
			opts := testOptions(b.TempDir(), 1, 1, 2)
			opts.MemoryBytes = 16 << 20
			opts.HoldBytes = 8 << 30
			l := openLog(b, opts)
			defer l.Close()
			ctx := context.Background()
			v := l.LastVersion()
			appendOne := func() time.Duration {
				t0 := time.Now()
				f := l.Append(&logentry.Entry{Version: v + 1, PrevVersion: v, Mutations: muts})
				if err := f.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				v++
				l.Pop(1, v)
				if !held {
					l.Pop(2, v)
				}
				return time.Since(t0)
			}
			if held {
				for l.Stats().Bytes < 48<<20 {
					appendOne()
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				lat = append(lat, appendOne())
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
			if s := l.Stats(); held && s.Spilled == 0 {
				b.Fatalf("nothing spilled: %+v", s)
			}
		})
	}
}
