// Command quickstart is the README's example: an embedded cluster, a
// write-through and a read-through in one transaction each.
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/distash/distash"
	"github.com/distash/distash/config"
	"github.com/distash/distash/server"
)

func main() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "distash")
	defer os.RemoveAll(dir)

	// An embedded cluster (or distash.Open a running one: "host:port").
	srv, err := server.Start(ctx, server.Options{Dir: dir, Config: config.Default()})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	db, err := distash.Open(ctx, srv.ClusterString())
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	cache, _ := db.Pool("cache") // DRAM, ephemeral, prefix "c/"
	data, _ := db.Pool("data")   // SSD, durable, prefix "d/"
	key := []byte("user:42")

	// Write-through: data and cache in one transaction.
	err = db.Transact(ctx, func(tr *distash.Tx) error {
		tr.Set(data.Key(key), []byte("Ada"))
		tr.Set(cache.Key(key), []byte("Ada"))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	// Read-through: a miss fills the cache in the same transaction. If a
	// writer changes the data meanwhile, this transaction aborts with
	// ErrNotCommitted and Transact runs it again: no stale fill (Figure 7).
	var name []byte
	err = db.Transact(ctx, func(tr *distash.Tx) error {
		v, err := tr.Get(cache.Key(key))
		if err != nil || v != nil {
			name = v
			return err
		}
		if v, err = tr.Get(data.Key(key)); err != nil {
			return err
		}
		tr.Set(cache.Key(key), v)
		name = v
		return nil
	})
	fmt.Printf("%s %v\n", name, err)
}
