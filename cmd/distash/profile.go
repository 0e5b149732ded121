package main

import (
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a CPU profile of this process to path until the
// returned stop is called (--cpuprofile of server, bench ingest and bench ycsb).
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
