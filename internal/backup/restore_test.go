package backup_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/distashtest"
	"github.com/distash/distash/internal/backup"
	"github.com/distash/distash/internal/kv"
)

// TestRestoreWriterMatchesModel: the restore applies the log in small
// batches, one at a time, each committed in a transaction that a retry
// after commit_unknown_result may run again. Random sets, clears, clear
// ranges and atomic operations (many on keys whose value the batch does
// not know, so it reads the target's), applied through batches of a few
// mutations each committed twice, leave the target equal to applying
// them in order to a map.
func TestRestoreWriterMatchesModel(t *testing.T) {
	ctx := distashtest.Context(t, 60*time.Second)
	c := distashtest.Start(t, twoPools)
	rng := rand.New(rand.NewPCG(23, 5))
	key := func() []byte { return fmt.Appendf(nil, "w/%02d", rng.IntN(30)) }
	model := map[string][]byte{}
	var muts []kv.Mutation
	for i := 0; i < 600; i++ {
		var m kv.Mutation
		switch r := rng.IntN(10); {
		case r < 3:
			m = kv.Mutation{Type: kv.MutSet, Key: key(), Param: kv.EncodeInt64(int64(rng.IntN(100)))}
		case r < 4:
			m = kv.Mutation{Type: kv.MutClear, Key: key()}
		case r < 5:
			b, e := key(), key()
			if string(b) > string(e) {
				b, e = e, b
			}
			m = kv.Mutation{Type: kv.MutClearRange, Key: b, Param: e}
		default:
			t := []kv.MutationType{kv.MutAdd, kv.MutAdd, kv.MutMax, kv.MutMin}[rng.IntN(4)]
			m = kv.Mutation{Type: t, Key: key(), Param: kv.EncodeInt64(int64(rng.IntN(50) - 10))}
		}
		muts = append(muts, m)
		switch m.Type {
		case kv.MutSet:
			model[string(m.Key)] = m.Param
		case kv.MutClear:
			delete(model, string(m.Key))
		case kv.MutClearRange:
			for k := range model {
				if k >= string(m.Key) && k < string(m.Param) {
					delete(model, k)
				}
			}
		default:
			old, ok := model[string(m.Key)]
			model[string(m.Key)] = kv.ApplyAtomic(m.Type, old, ok, m.Param)
		}
	}
	// About four mutations a batch: 150 batches.
	if err := backup.WriteForTest(ctx, c.DB, 40, muts, true); err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	if err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		kvs, err := tr.GetRange([]byte("w/"), []byte("w0"), distash.RangeOptions{})
		clear(got)
		for _, p := range kvs {
			got[string(p.Key)] = p.Value
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, model, func(a, b []byte) bool { return string(a) == string(b) }) {
		for k, v := range model {
			if string(got[k]) != string(v) {
				t.Errorf("%s: %d, want %d (present %v)", k, kv.DecodeInt64(got[k]), kv.DecodeInt64(v), got[k] != nil)
			}
		}
		for k := range got {
			if _, ok := model[k]; !ok {
				t.Errorf("%s: present, want absent", k)
			}
		}
	}
}
