package ult

import (
	"context"
	"iter"
	"time"
)

// SwitchCosts are measured costs of one switch between user-level threads.
type SwitchCosts struct {
	// Coroutine is a bare iter.Pull resume plus yield.
	Coroutine time.Duration
	// Scheduler is one yield through Scheduler.Run in real time: the
	// coroutine switch plus round-robin bookkeeping, the accounting clock
	// read and the completion-queue poll. This is the T_sw of the model.
	Scheduler time.Duration
	// StateMachine is the alternative to coroutines: an indirect call to a
	// hand-written state machine's step function (no stack switch at all).
	StateMachine time.Duration
}

type stepper interface{ step() bool }

type counterMachine struct{ n int }

func (c *counterMachine) step() bool {
	c.n++
	return c.n&0xffff != 0
}

// MeasureSwitch measures switch costs with n switches each, and returns
// the least of five measurements of each (on a shared machine the least is
// the one least disturbed by other processes). It takes about 5*n*0.5 µs.
func MeasureSwitch(n int) (SwitchCosts, error) {
	if n < 1000 {
		n = 1000
	}
	var best SwitchCosts
	for i := 0; i < 5; i++ {
		c, err := measureSwitch(n)
		if err != nil {
			return c, err
		}
		if i == 0 {
			best = c
			continue
		}
		best.Coroutine = min(best.Coroutine, c.Coroutine)
		best.Scheduler = min(best.Scheduler, c.Scheduler)
		best.StateMachine = min(best.StateMachine, c.StateMachine)
	}
	return best, nil
}

func measureSwitch(n int) (SwitchCosts, error) {
	var c SwitchCosts

	next, stop := iter.Pull(func(yield func(struct{}) bool) {
		for yield(struct{}{}) {
		}
	})
	for i := 0; i < n/10; i++ { // warm up
		next()
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		next()
	}
	c.Coroutine = time.Since(start) / time.Duration(n)
	stop()

	machines := make([]stepper, 16)
	for i := range machines {
		machines[i] = &counterMachine{}
	}
	start = time.Now()
	for i := 0; i < n; i++ {
		machines[i&15].step()
	}
	c.StateMachine = time.Since(start) / time.Duration(n)

	s, err := New(Config{Tasks: 16, IO: IOConfig{Mode: IOInline}})
	if err != nil {
		return c, err
	}
	defer s.Close()
	r, err := s.Run(context.Background(), RunOptions{MaxOps: int64(n)}, func(t *Task) {
		for t.Running() {
			t.EndOp()
		}
	})
	if err != nil {
		return c, err
	}
	if k := r.Kinds[KindPost]; k.Count > 0 {
		c.Scheduler = time.Duration(k.Ns / k.Count)
	}
	return c, nil
}
