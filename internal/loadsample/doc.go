// Package loadsample holds the two estimates a stash keeps of the data it
// serves, so that the data distributor can size and split shards without
// scanning them: ByteSample (the bytes of any key range, and the key that
// halves it by bytes: FoundationDB's byte sampling) and WriteRate (bytes
// written per second to any key range, and the key that halves it). They
// are plain data structures with no I/O and no clock of their own (time
// comes in as an argument), used by internal/stash; the distributor only
// sees what a stash reports from them.
package loadsample
