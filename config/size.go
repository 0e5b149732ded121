package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size units. IEC units are powers of 2, SI units powers of 10.
const (
	B   Size = 1
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
	TiB Size = 1 << 40
	PiB Size = 1 << 50
	EiB Size = 1 << 60

	KB Size = 1e3
	MB Size = 1e6
	GB Size = 1e9
	TB Size = 1e12
	PB Size = 1e15
	EB Size = 1e18
)

// sizeUnits maps a lower-case unit to its multiplier.
var sizeUnits = map[string]Size{
	"":    B,
	"b":   B,
	"kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB, "pib": PiB, "eib": EiB,
	"kb": KB, "mb": MB, "gb": GB, "tb": TB, "pb": PB, "eb": EB,
}

// iecUnits is used by MarshalText, largest first.
var iecUnits = []struct {
	name string
	mult Size
}{{"EiB", EiB}, {"PiB", PiB}, {"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}

const sizeHelp = `want a whole number of bytes with an optional unit, e.g. "4096", "512KiB", "256MiB", "10GiB", "1GB"`

// ParseSize parses a size such as "256MiB", "10GiB", "1GB" or "4096" (bytes).
// Units are case-insensitive; KB, MB, GB, TB, PB, EB are powers of 10 and
// KiB, MiB, GiB, TiB, PiB, EiB powers of 2. A space may separate the number
// and the unit. Negative, fractional and overflowing sizes are errors.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("invalid size %q: empty; %s", s, sizeHelp)
	}
	if t[0] == '-' {
		return 0, fmt.Errorf("invalid size %q: must not be negative", s)
	}
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("invalid size %q: %s", s, sizeHelp)
	}
	if i < len(t) && (t[i] == '.' || t[i] == ',') {
		return 0, fmt.Errorf("invalid size %q: must be a whole number (write \"1536MiB\" rather than \"1.5GiB\")", s)
	}
	unit := strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (use B, KB, MB, GB, TB, PB, EB or KiB, MiB, GiB, TiB, PiB, EiB)", s, strings.TrimSpace(t[i:]))
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil || n > math.MaxInt64/int64(mult) {
		return 0, fmt.Errorf("invalid size %q: too large (the maximum is %d bytes)", s, int64(math.MaxInt64))
	}
	return Size(n) * mult, nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseSize.
func (s *Size) UnmarshalText(text []byte) error {
	v, err := ParseSize(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText writes the size with the largest IEC unit that divides it
// ("64MiB", "1GiB"), or as a plain number of bytes ("1000"). Negative sizes
// are an error.
func (s Size) MarshalText() ([]byte, error) {
	if s < 0 {
		return nil, fmt.Errorf("invalid size %d: must not be negative", int64(s))
	}
	return []byte(s.String()), nil
}

// String returns the size as MarshalText writes it; a negative size is
// written as a plain (invalid) number.
func (s Size) String() string {
	if s > 0 {
		for _, u := range iecUnits {
			if s%u.mult == 0 {
				return strconv.FormatInt(int64(s/u.mult), 10) + u.name
			}
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// UnmarshalText implements encoding.TextUnmarshaler with time.ParseDuration.
func (d *Duration) UnmarshalText(text []byte) error {
	s := string(text)
	if strings.TrimSpace(s) == "" {
		return errors.New(`invalid duration "": empty; want a number with a unit, e.g. "500ms", "60s", "1m30s"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a number with a unit, e.g. \"500ms\", \"60s\", \"1m30s\"", s)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as a Go duration string without trailing
// zero units ("1m", "5s", "1h30m", "1.5s").
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.String()), nil
}

// String returns the duration as MarshalText writes it.
func (d Duration) String() string {
	s := d.Duration.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
