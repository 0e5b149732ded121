package ycsb_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/magiconair/properties"
	goycsb "github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/distash/distash"
	"github.com/distash/distash/distashtest"
	"github.com/distash/distash/ycsb"
)

const testConfig = `
[log]
replicas = 1

[[pool]]
name = "dram"
prefix = "m/"
medium = "dram"
mode = "ephemeral"
engine = "memory"
stashes = 1
replication = 1
capacity = "64MiB"
`

func TestEncodeFields(t *testing.T) {
	rec := map[string][]byte{"field1": []byte("b"), "field0": []byte("a"), "empty": {}}
	enc := ycsb.EncodeFields(rec)
	want := []byte("\x05empty\x00\x06field0\x01a\x06field1\x01b")
	if !bytes.Equal(enc, want) {
		t.Fatalf("EncodeFields = %q, want %q", enc, want)
	}
	got, err := ycsb.DecodeFields(enc, nil)
	if err != nil || len(got) != 3 || string(got["field0"]) != "a" || string(got["field1"]) != "b" || len(got["empty"]) != 0 {
		t.Fatalf("DecodeFields = %q, %v", got, err)
	}
	got, err = ycsb.DecodeFields(enc, []string{"field1"})
	if err != nil || len(got) != 1 || string(got["field1"]) != "b" {
		t.Fatalf("DecodeFields(field1) = %q, %v", got, err)
	}
	if _, err := ycsb.DecodeFields(enc[:len(enc)-1], nil); err == nil {
		t.Fatal("DecodeFields of a truncated record: no error")
	}
}

// TestDriver registers through the import, creates the driver from
// properties as go-ycsb does, and runs every operation against an embedded
// cluster, in the fields layout.
func TestDriver(t *testing.T) {
	c := distashtest.Start(t, testConfig)
	ctx := distashtest.Context(t, 30*time.Second)

	creator := goycsb.GetDBCreator("distash")
	if creator == nil {
		t.Fatal(`no DB creator "distash" registered`)
	}
	p := properties.NewProperties()
	p.Set(ycsb.PropCluster, c.Server.ClusterString())
	p.Set(ycsb.PropPool, "dram")
	p.Set(ycsb.PropPrefix, "y/")
	p.Set(ycsb.PropLayout, ycsb.LayoutFields)
	db, err := creator.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx = db.InitThread(ctx, 0, 1)
	defer db.CleanupThread(ctx)

	rec := func(i int) map[string][]byte {
		return map[string][]byte{"field0": fmt.Appendf(nil, "a%d", i), "field1": fmt.Appendf(nil, "b%d", i)}
	}
	for i := range 10 {
		if err := db.Insert(ctx, "usertable", fmt.Sprintf("user%02d", i), rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Another table's records must not show in scans.
	if err := db.Insert(ctx, "usertablf", "user00", rec(99)); err != nil {
		t.Fatal(err)
	}
	// The record is its base key in the pool, under the prefix.
	var raw []byte
	if err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		var err error
		raw, err = tr.Get([]byte("m/y/usertable/user03"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, ycsb.EncodeFields(rec(3))) {
		t.Fatalf("stored record %q", raw)
	}
	if _, err := db.Read(ctx, "usertable", "bad\x00key", nil); !errors.Is(err, ycsb.ErrBadKey) {
		t.Fatalf("Read of a key with a zero byte: %v", err)
	}

	got, err := db.Read(ctx, "usertable", "user03", nil)
	if err != nil || string(got["field0"]) != "a3" || string(got["field1"]) != "b3" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	got, err = db.Read(ctx, "usertable", "user03", []string{"field1"})
	if err != nil || len(got) != 1 || string(got["field1"]) != "b3" {
		t.Fatalf("Read(field1) = %q, %v", got, err)
	}
	if _, err := db.Read(ctx, "usertable", "nobody", nil); !errors.Is(err, ycsb.ErrNotFound) {
		t.Fatalf("Read of a missing record: %v", err)
	}

	if err := db.Update(ctx, "usertable", "user03", map[string][]byte{"field1": []byte("new")}); err != nil {
		t.Fatal(err)
	}
	got, err = db.Read(ctx, "usertable", "user03", nil)
	if err != nil || string(got["field0"]) != "a3" || string(got["field1"]) != "new" {
		t.Fatalf("after Update: %q, %v", got, err)
	}
	if err := db.Update(ctx, "usertable", "user03", map[string][]byte{"field1": []byte("newer"), "field2": []byte("c3")}); err != nil {
		t.Fatal(err)
	}
	got, err = db.Read(ctx, "usertable", "user03", []string{"field1", "field2"})
	if err != nil || len(got) != 2 || string(got["field1"]) != "newer" || string(got["field2"]) != "c3" {
		t.Fatalf("after a second Update: %q, %v", got, err)
	}
	// An update of a missing record is a blind write that reads ignore,
	// and an insert of that key starts from a clean record.
	if err := db.Update(ctx, "usertable", "user04x", map[string][]byte{"field9": []byte("orphan")}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Read(ctx, "usertable", "user04x", nil); !errors.Is(err, ycsb.ErrNotFound) {
		t.Fatalf("Read of a record only updated: %v", err)
	}

	rows, err := db.Scan(ctx, "usertable", "user03", 4, []string{"field0", "field1"})
	if err != nil || len(rows) != 4 || string(rows[0]["field1"]) != "newer" || string(rows[1]["field0"]) != "a4" ||
		string(rows[2]["field0"]) != "a5" || string(rows[3]["field0"]) != "a6" || len(rows[0]) != 2 {
		t.Fatalf("Scan (skipping an orphan override) = %q, %v", rows, err)
	}
	rows, err = db.Scan(ctx, "usertable", "user08", 10, nil)
	if err != nil || len(rows) != 2 {
		t.Fatalf("Scan past the table's end = %q, %v", rows, err)
	}
	// Records with many overrides span scan pages.
	for i := range 40 {
		if err := db.Update(ctx, "usertable", "user01", map[string][]byte{fmt.Sprintf("f%02d", i): []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	rows, err = db.Scan(ctx, "usertable", "user00", 3, nil)
	if err != nil || len(rows) != 3 || len(rows[1]) != 42 || string(rows[2]["field0"]) != "a2" {
		t.Fatalf("Scan over a record of 42 fields: %d rows, %v", len(rows), err)
	}
	if err := db.Insert(ctx, "usertable", "user04x", rec(4)); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Read(ctx, "usertable", "user04x", nil); err != nil || len(got) != 2 {
		t.Fatalf("Insert over an orphan override: %q, %v", got, err)
	}

	if err := db.Delete(ctx, "usertable", "user05"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Read(ctx, "usertable", "user05", nil); !errors.Is(err, ycsb.ErrNotFound) {
		t.Fatalf("Read after Delete: %v", err)
	}

	bdb := db.(goycsb.BatchDB)
	keys := []string{"b1", "b2"}
	if err := bdb.BatchInsert(ctx, "usertable", keys, []map[string][]byte{rec(1), rec(2)}); err != nil {
		t.Fatal(err)
	}
	if err := bdb.BatchUpdate(ctx, "usertable", keys, []map[string][]byte{{"field0": []byte("x")}, {"field1": []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	rows, err = bdb.BatchRead(ctx, "usertable", keys, nil)
	if err != nil || string(rows[0]["field0"]) != "x" || string(rows[0]["field1"]) != "b1" || string(rows[1]["field1"]) != "y" {
		t.Fatalf("BatchRead = %q, %v", rows, err)
	}
	if err := bdb.BatchDelete(ctx, "usertable", keys); err != nil {
		t.Fatal(err)
	}
	if _, err := bdb.BatchRead(ctx, "usertable", keys, nil); !errors.Is(err, ycsb.ErrNotFound) {
		t.Fatalf("BatchRead after BatchDelete: %v", err)
	}
}

// TestDriverRecordLayout: the default layout, record, keeps a record in one
// key; an update is a read-modify-write that fails for a missing record.
func TestDriverRecordLayout(t *testing.T) {
	c := distashtest.Start(t, testConfig)
	ctx := distashtest.Context(t, 30*time.Second)
	p := properties.NewProperties()
	p.Set(ycsb.PropCluster, c.Server.ClusterString())
	p.Set(ycsb.PropPool, "dram")
	p.Set(ycsb.PropLayout, "bogus")
	if _, err := (ycsb.Creator{}).Create(p); err == nil {
		t.Fatal("layout bogus accepted")
	}
	p.Set(ycsb.PropLayout, "") // the default: record
	db, err := (ycsb.Creator{}).Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 5 {
		if err := db.Insert(ctx, "t", fmt.Sprintf("k%d", i), map[string][]byte{"f0": {byte('a' + i)}, "f1": []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Update(ctx, "t", "k2", map[string][]byte{"f1": []byte("y")}); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := c.DB.ReadTransact(ctx, func(tr *distash.Tx) error {
		kvs, err := tr.GetRange([]byte("m/t/k2"), []byte("m/t/k2\x01"), distash.RangeOptions{})
		if len(kvs) != 1 {
			return fmt.Errorf("record k2 is %d keys, want 1", len(kvs))
		}
		raw = kvs[0].Value
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := ycsb.EncodeFields(map[string][]byte{"f0": []byte("c"), "f1": []byte("y")}); !bytes.Equal(raw, want) {
		t.Fatalf("stored %q, want %q", raw, want)
	}
	if err := db.Update(ctx, "t", "missing", map[string][]byte{"f1": []byte("y")}); !errors.Is(err, ycsb.ErrNotFound) {
		t.Fatalf("Update of a missing record: %v", err)
	}
	rows, err := db.Scan(ctx, "t", "k1", 3, nil)
	if err != nil || len(rows) != 3 || string(rows[1]["f1"]) != "y" {
		t.Fatalf("Scan = %q, %v", rows, err)
	}
	bdb := db.(goycsb.BatchDB)
	rows, err = bdb.BatchRead(ctx, "t", []string{"k0", "k4"}, []string{"f0"})
	if err != nil || string(rows[0]["f0"]) != "a" || string(rows[1]["f0"]) != "e" || len(rows[1]) != 1 {
		t.Fatalf("BatchRead = %q, %v", rows, err)
	}
}
