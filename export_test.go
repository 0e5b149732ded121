package distash

import "time"

// SetRecentReadVersionAge sets how old a version SetRecentReadVersion may
// use (tests lengthen it, so that a slow machine still exercises the
// recent-version path) and returns a function restoring it.
func SetRecentReadVersionAge(d time.Duration) func() {
	old := recentReadVersionAge.Swap(int64(d))
	return func() { recentReadVersionAge.Store(old) }
}

// DataPathStreams returns how many read and commit streams the process's
// clients opened over frames and over gRPC.
func DataPathStreams() (frames, grpc int64) { return framesStreams.Load(), grpcStreams.Load() }

// StashRetired reports whether the client's view calls stash tag retired.
func (db *DB) StashRetired(tag uint32) bool {
	r := db.stashes.Load()
	return r != nil && r.byTag[tag].retired
}

// FirstReadRaces returns how many first reads sent while their read version
// was on its way were kept (won) and read again (lost).
func (db *DB) FirstReadRaces() (won, lost int64) { return db.racesWon.Load(), db.racesLost.Load() }

// RaceLossLimit and RaceProbeEvery: after RaceLossLimit races lost in a
// row, one first read in RaceProbeEvery races.
const (
	RaceLossLimit  = raceLossLimit
	RaceProbeEvery = raceProbeEvery
)
