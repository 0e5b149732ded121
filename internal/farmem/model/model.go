// Package model is the throughput model of Bando et al. (SIGMOD 2025) for
// KV operations whose in-memory structures sit in microsecond-latency
// memory and whose lookups run on user-level threads that prefetch and
// yield.
//
// An operation is a sequence of suboperations, the stretches a thread runs
// between two switches. M memory suboperations each compute for T_mem and
// end by prefetching the next line and switching (T_sw); the operation's
// read adds a pre-IO suboperation (T_io_pre, submit, switch) and a post-IO
// one (T_io_post, switch). The core's CPU time per operation is
//
//	C = M(T_mem + T_sw) + T_io_pre + T_io_post + 2 T_sw.
//
// A core holds at most P fetches in flight (its line-fill buffers), so the
// F = M fetches of an operation take at least F·L_mem/P of core time. The
// time per operation is then bounded by
//
//	best  = max(C, F·L_mem/P)                      (IO work fully overlaps the fetches)
//	worst = max(M(T_mem+T_sw), F·L_mem/P) + T_io   (IO work never overlaps them)
//
// and the probabilistic model places itself in between by treating the
// core's stream of suboperations as a random interleaving of the threads'
// operations. Between a prefetch and the one P fetches later the core runs
// P memory suboperations plus X suboperations without prefetches (IO, ...),
// X negative-binomially distributed with the share q of such suboperations;
// if that window W is shorter than L_mem the core stalls for L_mem - W
// before it can issue the next prefetch. With F/P windows per operation,
//
//	T(L_mem) = C + (F/P)·E[(L_mem - W)^+].
//
// The formulation here is this package's own derivation of the paper's
// idea for the suboperations the ult scheduler produces; the published
// notebook (github.com/ybandy/cxlkvs) draws the window's IO suboperations
// slightly differently. Demand misses (accesses without a prefetch, all of
// them when prefetching is off) stall the core for a whole L_mem each and
// add Misses·L_mem to every variant.
//
// Parameters are not typed in: FromResult measures them from a run of the
// scheduler, normally the one at the smallest latency of a sweep.
package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/distash/distash/internal/farmem/ult"
)

// Class is a kind of suboperation that issues no prefetch.
type Class struct {
	Name string
	N    float64 // per operation
	D    float64 // mean duration in ns, switch included, stalls excluded
	// Samples, if any, are measured durations (ns) whose mean is D;
	// Interleaved draws from them instead of using D for every one.
	Samples []float64
}

// Params are the model's inputs, in nanoseconds and counts per operation.
type Params struct {
	// M is the number of memory suboperations (ending with a prefetch) per operation.
	M float64
	// A is their mean duration, T_mem + T_sw.
	A float64
	// ASamples, if any, are measured durations of memory suboperations
	// (mean A), drawn from by Interleaved.
	ASamples []float64
	// F is the number of lines prefetched from far memory per operation (M
	// when each memory suboperation fetches one line).
	F float64
	// Misses is the number of demand misses per operation: accesses to
	// lines that were not prefetched, each a full L_mem stall.
	Misses float64
	// Others are the suboperations without prefetches (IO pre, IO post, waits).
	Others []Class
	// P is the number of line-fill buffers per core.
	P int
	// Tsw is the measured switch cost, used only to split A and the
	// others' durations into the paper's T_mem, T_io_pre, T_io_post.
	Tsw float64
}

// CPU returns C, the core time per operation without far-memory stalls.
func (p Params) CPU() float64 {
	c := p.M * p.A
	for _, o := range p.Others {
		c += o.N * o.D
	}
	return c
}

func (p Params) other() float64 {
	var c float64
	for _, o := range p.Others {
		c += o.N * o.D
	}
	return c
}

func (p Params) lfbBound(l float64) float64 {
	if p.P <= 0 {
		return 0
	}
	return p.F * l / float64(p.P)
}

// Best returns the optimistic time per operation at memory latency l (ns).
func (p Params) Best(l float64) float64 {
	return math.Max(p.CPU(), p.lfbBound(l)) + p.Misses*l
}

// Worst returns the pessimistic time per operation at memory latency l (ns).
func (p Params) Worst(l float64) float64 {
	return math.Max(p.M*p.A, p.lfbBound(l)) + p.other() + p.Misses*l
}

// Probabilistic returns the expected time per operation at memory
// latency l (ns) under random interleaving.
func (p Params) Probabilistic(l float64) float64 {
	t := p.CPU() + p.Misses*l
	if p.F <= 0 || p.M <= 0 || p.P <= 0 {
		return t
	}
	return t + p.F/float64(p.P)*p.expectedStall(l)
}

// expectedStall returns E[(l - W)^+] for one window of P fetches.
func (p Params) expectedStall(l float64) float64 {
	perSub := p.F / p.M        // fetches per memory suboperation
	r := float64(p.P) / perSub // memory suboperations per window
	base := l - r*p.A          // stall if no other suboperation intervenes
	if base <= 0 {
		return 0
	}
	var nOther float64
	var cls []Class
	for _, o := range p.Others {
		if o.N > 0 {
			nOther += o.N
			cls = append(cls, o)
		}
	}
	if nOther == 0 {
		return base
	}
	q := nOther / (p.M + nOther) // share of suboperations without a prefetch
	dmin := math.Inf(1)
	w := make([]float64, len(cls))
	for i, c := range cls {
		w[i] = c.N / nOther
		dmin = math.Min(dmin, c.D)
	}
	var e, mass float64
	lgr, _ := math.Lgamma(r)
	for x := 0; ; x++ {
		// Negative binomial: x suboperations without prefetch before the
		// r-th memory suboperation.
		lg, _ := math.Lgamma(float64(x) + r)
		lf, _ := math.Lgamma(float64(x) + 1)
		px := math.Exp(lg - lf - lgr + r*math.Log1p(-q) + float64(x)*math.Log(q))
		mass += px
		if px > 0 {
			e += px * expectedShortfall(x, base, cls, w)
		}
		if base-float64(x)*dmin <= 0 || 1-mass < 1e-12 || x > 100000 {
			break
		}
	}
	return e
}

// expectedShortfall returns E[(base - S)^+] where S is the total duration of
// x suboperations drawn from the classes with weights w.
func expectedShortfall(x int, base float64, cls []Class, w []float64) float64 {
	lfx, _ := math.Lgamma(float64(x) + 1)
	var rec func(i, left int, sum, logp float64) float64
	rec = func(i, left int, sum, logp float64) float64 {
		if sum >= base {
			return 0
		}
		if i == len(cls)-1 {
			s := sum + float64(left)*cls[i].D
			if s >= base {
				return 0
			}
			lf, _ := math.Lgamma(float64(left) + 1)
			lp := logp - lf + float64(left)*math.Log(w[i])
			return math.Exp(lfx+lp) * (base - s)
		}
		var e float64
		for c := 0; c <= left; c++ {
			lf, _ := math.Lgamma(float64(c) + 1)
			lp := logp - lf
			if c > 0 {
				lp += float64(c) * math.Log(w[i])
			}
			s := sum + float64(c)*cls[i].D
			if s >= base {
				break
			}
			e += rec(i+1, left-c, s, lp)
		}
		return e
	}
	return rec(0, x, 0, 0)
}

// InterleavedSteps is the number of suboperations Interleaved simulates.
const InterleavedSteps = 400_000

// Interleaved evaluates the same random-interleaving assumption as
// Probabilistic without the block approximation: it runs the core's
// line-fill buffers over a seeded random sequence of suboperations (drawn
// with the measured shares and durations) and returns the mean time per
// operation at latency l (ns). Probabilistic checks the LFB constraint
// once per block of P fetches; in fact every fetch must wait for the one P
// fetches before it, so windows overlap and stalls near the knee
// (L_mem ≈ P·(T_mem+T_sw) plus the IO work in between) are larger than the
// closed form says. The result is deterministic.
func (p Params) Interleaved(l float64) float64 {
	if p.M <= 0 || p.F <= 0 || p.P <= 0 {
		return p.CPU() + p.Misses*l
	}
	weights := []float64{p.M}
	durs := []float64{p.A}
	samples := [][]float64{p.ASamples}
	for _, o := range p.Others {
		if o.N > 0 {
			weights = append(weights, o.N)
			durs = append(durs, o.D)
			samples = append(samples, o.Samples)
		}
	}
	var total float64
	for _, w := range weights {
		total += w
	}
	cum := make([]float64, len(weights))
	var acc float64
	for i, w := range weights {
		acc += w / total
		cum[i] = acc
	}
	perSub := p.F / p.M
	lfb := make([]float64, p.P) // arrival times in issue order
	head, count := 0, 0
	x := uint64(0x9e3779b97f4a7c15)
	rnd := func() float64 { // xorshift64*
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		return float64((x*2685821657736338717)>>11) / (1 << 53)
	}
	var t float64
	for step := 0; step < InterleavedSteps; step++ {
		u := rnd()
		c := 0
		for c < len(cum)-1 && u >= cum[c] {
			c++
		}
		if xs := samples[c]; len(xs) > 0 {
			t += xs[int(rnd()*float64(len(xs)))]
		} else {
			t += durs[c]
		}
		if c != 0 {
			continue
		}
		fetches := int(perSub)
		if rnd() < perSub-float64(fetches) {
			fetches++
		}
		for f := 0; f < fetches; f++ {
			for count > 0 && lfb[head] <= t {
				head = (head + 1) % p.P
				count--
			}
			if count == p.P {
				t = lfb[head]
				head = (head + 1) % p.P
				count--
			}
			lfb[(head+count)%p.P] = t + l
			count++
		}
	}
	ops := InterleavedSteps / total
	return t/ops + p.Misses*l
}

// Variant names a model.
type Variant int

// Model variants.
const (
	// Probabilistic is the closed form (block approximation).
	Probabilistic Variant = iota
	// Interleaved is the random-interleaving assumption evaluated by simulation.
	Interleaved
	// Best is max(C, F·L/P).
	Best
	// Worst is max(M(T_mem+T_sw), F·L/P) + the IO work.
	Worst
)

func (v Variant) String() string {
	return [...]string{"probabilistic", "interleaved", "best", "worst"}[v]
}

// OpNs returns the modelled time per operation of variant v at latency l.
func (p Params) OpNs(v Variant, l float64) float64 {
	switch v {
	case Best:
		return p.Best(l)
	case Worst:
		return p.Worst(l)
	case Interleaved:
		return p.Interleaved(l)
	}
	return p.Probabilistic(l)
}

// Normalized returns the modelled throughput at latency l relative to the
// throughput at latency l0.
func (p Params) Normalized(v Variant, l, l0 float64) float64 {
	return p.OpNs(v, l0) / p.OpNs(v, l)
}

// FromResult measures the model's parameters from a scheduler run; p is
// the core's line-fill buffers and tsw the measured switch cost in ns.
func FromResult(r ult.Result, p int, tsw float64) Params {
	ops := float64(r.Ops)
	if ops == 0 {
		return Params{P: p, Tsw: tsw}
	}
	mem := r.Kinds[ult.KindMem]
	out := Params{
		M:        float64(mem.Count) / ops,
		A:        mem.MeanNs(),
		ASamples: r.Samples[ult.KindMem],
		F:        float64(r.Mem.Prefetches) / ops,
		Misses:   float64(r.Mem.Misses) / ops,
		P:        p,
		Tsw:      tsw,
	}
	for _, k := range []ult.Kind{ult.KindPre, ult.KindPost, ult.KindWait} {
		ks := r.Kinds[k]
		if ks.Count == 0 {
			continue
		}
		out.Others = append(out.Others, Class{Name: k.String(), N: float64(ks.Count) / ops, D: ks.MeanNs(), Samples: r.Samples[k]})
	}
	return out
}

// Other returns the class called name (zero if absent).
func (p Params) Other(name string) Class {
	for _, o := range p.Others {
		if o.Name == name {
			return o
		}
	}
	return Class{Name: name}
}

// String prints the parameters in the paper's terms.
func (p Params) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "M=%.2f F=%.2f misses=%.2f P=%d T_sw=%.0fns T_mem=%.0fns",
		p.M, p.F, p.Misses, p.P, p.Tsw, p.A-p.Tsw)
	for _, o := range p.Others {
		fmt.Fprintf(&b, " %s: %.2f x (%.0fns - T_sw)", o.Name, o.N, o.D)
	}
	fmt.Fprintf(&b, " C=%.0fns", p.CPU())
	return b.String()
}
