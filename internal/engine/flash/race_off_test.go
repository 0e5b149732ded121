//go:build !race

package flash_test

const raceEnabled = false
