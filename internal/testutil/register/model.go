// Package register is the porcupine model the linearizability tests check
// single-key histories against: one register per key.
package register

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// Input is an operation on a register key: a set of Value, a get (whose
// output is the string read, "" for absent), or a swap (Swap: a get and a
// set of Value in one transaction, whose output is the string read).
type Input struct {
	Write bool
	Swap  bool
	Key   string
	Value string
}

// Model is a register per key (porcupine checks each key's history on its
// own): a get returns the last value set, "" before any.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(Input).Key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(Input)
		switch {
		case in.Write:
			return true, in.Value
		case in.Swap:
			return output.(string) == state.(string), in.Value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(Input)
		if in.Write {
			return fmt.Sprintf("set(%s, %s)", in.Key, in.Value)
		}
		if in.Swap {
			return fmt.Sprintf("swap(%s, %s) -> %q", in.Key, in.Value, output)
		}
		return fmt.Sprintf("get(%s) -> %q", in.Key, output)
	},
}
