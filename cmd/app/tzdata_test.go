package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Merchants' zones, plans' visits and working hours are read through
// time.LoadLocation, which looks for the zone database on the machine
// (/usr/share/zoneinfo, the tzdata package) and then in the Go tree the
// binary was built from. A host or container image without tzdata (an
// image from scratch, a minimal one) has neither: every zone but UTC would
// be unknown, PUT /v1/settings would refuse Europe/London, and every plan
// and availability query of a merchant whose zone was set would fail. The
// binary carries Go's copy of the database (time/tzdata) for that case.
// Checked on the package's dependencies: the test binary runs where Go's
// own copy is always found.
func TestTheBinaryCarriesTheTimeZoneDatabase(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.True(t, slices.Contains(strings.Fields(string(out)), "time/tzdata"),
		"cmd/app does not embed time/tzdata: on a host without the tzdata package every time zone but UTC is unknown")
}
