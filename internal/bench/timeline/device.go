package timeline

import "github.com/distash/distash/internal/wire"

// fillDevice copies a stash's emulated device figures into p (nothing
// when the stash's pool emulates none).
func fillDevice(p *StashPoint, ss *wire.StashStatus) {
	d := ss.GetDevice()
	if d == nil {
		return
	}
	p.busySeconds = d.BusySeconds
	p.QueueLength = int64(d.QueueLength)
	p.ReadP99Ms = d.ReadP99Us / 1000
	p.readBytes, p.writtenBytes = float64(d.ReadBytes), float64(d.WrittenBytes)
}
