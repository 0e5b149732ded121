// Package wire holds the protobuf messages and the gRPC service of the
// DiStash wire protocol, generated from proto/distash.proto. The generated
// files are committed so builds need no protoc.
package wire

//go:generate protoc -I ../../proto --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative distash.proto
