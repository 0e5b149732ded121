package graph

import (
	"bytes"
	"math"
	"os"
	"strconv"
	"syscall"
	"time"
)

// cpuReading is the CPU time this process and the whole machine had used
// at one instant (machine: NaN where /proc/stat is not readable).
type cpuReading struct {
	at           time.Time
	own, machine float64 // seconds
}

// cpuSecond is the cores used between two readings.
type cpuSecond struct{ own, machine float64 }

func readCPU() cpuReading {
	r := cpuReading{at: time.Now(), own: math.NaN(), machine: math.NaN()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.own = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	// The first line of /proc/stat: "cpu user nice system idle iowait irq
	// softirq steal ..." in clock ticks (USER_HZ, 100 on Linux).
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := bytes.Cut(b, []byte("\n"))
		f := bytes.Fields(line)
		if len(f) > 8 && string(f[0]) == "cpu" {
			busy := 0.0
			for i, x := range f[1:9] {
				if i == 3 || i == 4 { // idle, iowait
					continue
				}
				v, _ := strconv.ParseFloat(string(x), 64)
				busy += v
			}
			r.machine = busy / 100
		}
	}
	return r
}

func (r cpuReading) since(p cpuReading) cpuSecond {
	dt := r.at.Sub(p.at).Seconds()
	if dt <= 0 {
		return cpuSecond{math.NaN(), math.NaN()}
	}
	return cpuSecond{own: (r.own - p.own) / dt, machine: (r.machine - p.machine) / dt}
}
