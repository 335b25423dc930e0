package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// With LOG_FORMAT=json, a log pipeline reads Hearth's standard error as
// JSON lines. The line that says why Hearth stopped (a database it cannot
// reach, a bad setting, a bad command line) is the one an operator needs
// most, so it must be a JSON record too, not a line of text the pipeline
// drops or splits; it names the setting and never the password.
func TestAFailureIsAJSONRecordWithLogFormatJSON(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	u, err := url.Parse(pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "hunter2-secret")
	u.Path = "/no_such_database"
	for _, tc := range []struct {
		name   string
		args   []string
		env    []string
		status int
		names  string // in the record's error
	}{
		{name: "a database that is not there", args: []string{"serve"}, env: []string{"DATABASE_URL=" + u.String(), "MASTER_KEY=" + testMasterKey},
			status: 1, names: "DATABASE_URL"},
		{name: "a bad setting", args: []string{"serve"}, env: []string{"DATABASE_URL=" + u.String(), "MASTER_KEY=" + testMasterKey, "MODE=both"},
			status: 1, names: "MODE"},
		{name: "a bad command line", args: []string{"keys", "frobnicate"}, status: 2, names: "keys: the subcommands are"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = append(os.Environ(), append(tc.env, "LOG_FORMAT=json")...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "the command fails: %v", err)
			require.Equal(t, tc.status, exit.ExitCode(), "stderr: %s", stderr.String())
			require.Empty(t, stdout.String(), "stdout carries only what scripts capture")
			require.NotContains(t, stderr.String(), "hunter2-secret")

			var last map[string]any
			lines := bufio.NewScanner(&stderr)
			lines.Buffer(nil, 1<<20)
			for lines.Scan() {
				last = nil
				require.NoError(t, json.Unmarshal(lines.Bytes(), &last), "LOG_FORMAT=json, yet a line of standard error is no JSON record: %s", lines.Text())
			}
			require.NotNil(t, last, "the failure is reported")
			require.Equal(t, "ERROR", last["level"], "%v", last)
			require.Contains(t, last["error"], tc.names, "%v", last)
			require.Equal(t, float64(tc.status), last["exit_status"], "%v", last)
		})
	}
}

// rebuild writes its progress on standard error; off a terminal (a job, a
// pipeline) with LOG_FORMAT=json, as log records, not lines of text among
// them.
func TestRebuildProgressIsJSONWithLogFormatJSON(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	vars := map[string]string{"DATABASE_URL": urls.EventStore, "READMODEL_DATABASE_URL": urls.ReadModel, "USER": "tester",
		"MASTER_KEY": testMasterKey, "LOG_FORMAT": "json"}
	var stdout, stderr syncBuffer
	require.NoError(t, run(t.Context(), []string{"rebuild", "orders"}, env(vars), &stdout, &stderr))
	require.Contains(t, stdout.String(), "rebuild orders: done")
	progress := 0
	for line := range strings.Lines(stderr.String()) {
		var record map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &record), "LOG_FORMAT=json, yet a line of standard error is no JSON record: %s", line)
		if record["msg"] == "rebuild progress" {
			progress++
			require.Equal(t, "orders", record["projection"], "%v", record)
		}
	}
	require.NotZero(t, progress, "the progress is logged: %s", stderr.String())
}
