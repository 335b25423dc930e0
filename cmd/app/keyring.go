package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"hearth/internal/keyring"
)

// keyringCommand runs `app keyring new [ID]`: it prints a new master key
// line (ID:KEY) for MASTER_KEY or MASTER_KEY_FILE, and stores it nowhere.
func keyringCommand(_ context.Context, _ Config, sub string, _ keyFlags, rest []string, _ func(string) string, stdout io.Writer) error {
	switch sub {
	case "new":
		if len(rest) > 1 {
			return usageError{fmt.Sprintf("keyring new: one ID at most, not %q", rest)}
		}
		id := "k" + time.Now().UTC().Format("20060102")
		if len(rest) == 1 {
			id = rest[0]
		}
		line, err := keyring.New(id)
		if err != nil {
			return usageError{"keyring new: " + err.Error()}
		}
		fmt.Fprintln(stdout, line)
		return nil
	}
	return usageError{"keyring: unknown subcommand " + sub}
}
