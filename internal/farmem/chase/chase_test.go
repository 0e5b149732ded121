package chase

import (
	"testing"
	"unsafe"

	"github.com/distash/distash/internal/farmem"
)

func TestChainIsOneCycle(t *testing.T) {
	const n = 10000
	c := NewChain(n, 42)
	if len(c.Items) != n || uintptr(unsafe.Pointer(&c.Items[0]))%farmem.LineSize != 0 {
		t.Fatalf("%d items, aligned %v", len(c.Items), uintptr(unsafe.Pointer(&c.Items[0]))%farmem.LineSize == 0)
	}
	seen := make([]bool, n)
	p := uint64(0)
	for i := 0; i < n; i++ {
		if seen[p] {
			t.Fatalf("item %d revisited after %d steps", p, i)
		}
		seen[p] = true
		p = c.Items[p].Next
	}
	if p != 0 {
		t.Fatal("the walk does not return to its start")
	}
	if b := AlignedBuffer(4096); len(b) != 4096 || uintptr(unsafe.Pointer(&b[0]))%4096 != 0 {
		t.Fatal("AlignedBuffer is not aligned")
	}
}
