package distash_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
)

// TestSystemKeysNeedAnOption: reads of the \xff system key space fail
// unless the transaction sets SetReadSystemKeys (FoundationDB's
// READ_SYSTEM_KEYS); with it, the shard map and the recorded configuration
// are readable. Writes there are refused either way.
func TestSystemKeysNeedAnOption(t *testing.T) {
	c := startCluster(t, twoPools)
	ctx := ctxT(t, 20*time.Second)
	if err := c.DB.Transact(ctx, func(tr *distash.Tx) error { tr.Set([]byte("d/k"), []byte("v")); return nil }); err != nil {
		t.Fatal(err)
	}
	conf := []byte("\xff/conf/cluster")
	err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		if _, err := tr.Get(conf); !errors.Is(err, distash.ErrKeyOutsidePools) {
			t.Errorf("Get of a system key without the option: %v, want ErrKeyOutsidePools", err)
		}
		if _, err := tr.GetRange([]byte("\xff"), []byte("\xff\xff"), distash.RangeOptions{}); !errors.Is(err, distash.ErrKeyOutsidePools) {
			t.Errorf("GetRange of the system space without the option: %v, want ErrKeyOutsidePools", err)
		}
		// A range reaching past the user keys stops at them.
		kvs, err := tr.GetRange([]byte(""), []byte("\xff\xff"), distash.RangeOptions{})
		if err != nil {
			return err
		}
		for _, p := range kvs {
			if bytes.HasPrefix(p.Key, []byte{0xff}) {
				t.Errorf("GetRange without the option returned system key %q", p.Key)
			}
		}
		if len(kvs) != 1 {
			t.Errorf("GetRange of every user key: %d pairs, want 1", len(kvs))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		tr.Options().SetReadSystemKeys()
		v, err := tr.Get(conf)
		if err != nil {
			return err
		}
		cfg, err := config.Parse(v)
		if err != nil {
			t.Fatalf("recorded configuration: %v\n%s", err, v)
		}
		if len(cfg.Pools) != 2 || cfg.Pools[1].Prefix != "d/" {
			t.Errorf("recorded configuration has pools %+v", cfg.Pools)
		}
		shards, err := tr.GetRange([]byte("\xff/keyServers/"), []byte("\xff/keyServers0"), distash.RangeOptions{})
		if err != nil {
			return err
		}
		if len(shards) == 0 {
			t.Error("no shard map entries with SetReadSystemKeys")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.DB.Transact(ctx, func(tr *distash.Tx) error {
		tr.Options().SetReadSystemKeys()
		tr.Set(conf, []byte("x"))
		return nil
	})
	if !errors.Is(err, distash.ErrKeyOutsidePools) {
		t.Fatalf("write of a system key: %v, want ErrKeyOutsidePools", err)
	}
}
