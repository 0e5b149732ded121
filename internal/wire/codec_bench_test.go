package wire

import (
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// BenchmarkCodec compares gRPC's protobuf codec ("grpc", what the wire
// messages used before) with this package's ("vt") on the messages of a
// point read and a single-key commit: one Marshal and one Unmarshal per
// op, as a frame is sent and received. cpu-ns/op is the process's CPU time
// per op. "vt-nocheck" is the generated
// decoder without wireTable.check, to show what the check costs.
//
//	go test -run '^$' -bench Codec -benchmem ./internal/wire
func BenchmarkCodec(b *testing.B) {
	msgs := []struct {
		name  string
		m     vtMessage
		fresh func() vtMessage
	}{
		{"ReadStreamRequest", seedReadStreamRequests[0], func() vtMessage { return new(ReadStreamRequest) }},
		{"ReadStreamResponse", seedReadStreamResponses[1], func() vtMessage { return new(ReadStreamResponse) }},
		{"ReadStreamResponse1KiB", seedReadStreamResponses[0], func() vtMessage { return new(ReadStreamResponse) }},
		{"CommitStreamRequest", seedCommitStreamRequests[0], func() vtMessage { return new(CommitStreamRequest) }},
		{"CommitStreamResponse", seedCommitStreamResponses[0], func() vtMessage { return new(CommitStreamResponse) }},
		{"GetReadVersionResponse", seedGRVResponses[0], func() vtMessage { return new(GetReadVersionResponse) }},
	}
	ours := encoding.GetCodecV2(CodecName).(codec)
	for _, c := range msgs {
		frame, err := proto.Marshal(c.m)
		if err != nil {
			b.Fatal(err)
		}
		run := func(name string, marshal func() (mem.BufferSlice, error), unmarshal func(mem.BufferSlice, vtMessage) error) {
			b.Run(c.name+"/"+name, func(b *testing.B) {
				b.ReportAllocs()
				cpu := processCPU()
				for b.Loop() {
					enc, err := marshal()
					if err != nil {
						b.Fatal(err)
					}
					enc.Free()
					if err := unmarshal(mem.BufferSlice{mem.SliceBuffer(frame)}, c.fresh()); err != nil {
						b.Fatal(err)
					}
				}
				// Process CPU time (GC included) is steadier than ns/op
				// on a shared machine.
				b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
		run("grpc",
			func() (mem.BufferSlice, error) { return ours.fallback.Marshal(c.m) },
			func(d mem.BufferSlice, m vtMessage) error { return ours.fallback.Unmarshal(d, m) })
		run("vt",
			func() (mem.BufferSlice, error) { return ours.Marshal(c.m) },
			func(d mem.BufferSlice, m vtMessage) error { return ours.Unmarshal(d, m) })
		run("vt-nocheck",
			func() (mem.BufferSlice, error) { return ours.Marshal(c.m) },
			func(d mem.BufferSlice, m vtMessage) error { return m.UnmarshalVT(d[0].ReadOnlyData()) })
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
