package keyfilter

import (
	"fmt"
	"testing"
)

func TestNoFalseNegativesAndFewFalsePositives(t *testing.T) {
	f := New(10_000)
	for i := 0; i < 10_000; i++ {
		f.Add([]byte(fmt.Sprintf("key-%d", i)))
	}
	for i := 0; i < 10_000; i++ {
		if !f.MayContain([]byte(fmt.Sprintf("key-%d", i))) {
			t.Fatalf("key-%d: false negative", i)
		}
	}
	fp := 0
	for i := 0; i < 10_000; i++ {
		if f.MayContain([]byte(fmt.Sprintf("absent-%d", i))) {
			fp++
		}
	}
	if fp > 300 {
		t.Fatalf("%d false positives in 10000 (target 1%%)", fp)
	}
	if f.Full() {
		t.Fatal("full at capacity")
	}
	f.Add([]byte("one more"))
	if !f.Full() {
		t.Fatal("not full past capacity")
	}
}
