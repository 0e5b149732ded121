// Package wire holds the protobuf messages and the gRPC service of the
// DiStash wire protocol, generated from proto/distash.proto. The generated
// files are committed so builds need no protoc.
//
// distash_vtproto.pb.go adds reflection-free MarshalVT, UnmarshalVT and
// SizeVT methods (vtprotobuf); codec.go registers a gRPC codec that uses them,
// so every client and server in a binary that imports this package does.
package wire

//go:generate protoc -I ../../proto --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative --go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size distash.proto
