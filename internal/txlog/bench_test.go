package txlog

import (
	"context"
	"fmt"
	"testing"
	"time"

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
