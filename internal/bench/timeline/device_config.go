package timeline

import (
	"fmt"

	"github.com/distash/distash/config"
)

// ApplyDevice gives every pool of cfg but the DRAM ones an emulated device
// of profile scaled by scale, and returns lines for the output saying
// what each pool got.
func ApplyDevice(cfg *config.Config, profile string, scale float64) ([]string, error) {
	if profile == "" || profile == "none" {
		return nil, nil
	}
	return nil, fmt.Errorf("--device-profile %s: device emulation is not in this build", profile)
}
