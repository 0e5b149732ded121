package distash

import "sync"

// replyChans keeps the one-reply channels of the hot paths (a read or
// commit waiting for its stream's reply, a transaction for its read
// version) for reuse: a buffered channel is two allocations. A channel
// goes back only once its one reply was received, when no sender holds it
// any more; one given up on (the caller's context ended, or closed when
// its stream broke) is left to the collector.
type replyChans[T any] struct{ p sync.Pool }

func (r *replyChans[T]) get() chan T {
	if ch, ok := r.p.Get().(chan T); ok {
		return ch
	}
	return make(chan T, 1)
}

// put returns ch, empty and open, whose sender is done with it.
func (r *replyChans[T]) put(ch chan T) { r.p.Put(ch) }
