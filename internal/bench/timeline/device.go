package timeline

import "github.com/distash/distash/internal/wire"

// fillDevice copies a stash's emulated device figures into p. Until the
// device status exists (branch devfs) there is none to copy.
func fillDevice(p *StashPoint, ss *wire.StashStatus) {}
