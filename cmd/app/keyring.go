package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"hearth/adapters/vault"
	"hearth/adapters/webhooks"
	"hearth/app/ops"
	"hearth/internal/database"
	"hearth/internal/keyring"
	"hearth/internal/refdata"
)

// keyringCommand runs `app keyring new [ID]`, which prints a new master key
// line (ID:KEY) for MASTER_KEY or MASTER_KEY_FILE and stores it nowhere,
// and `app keyring rewrap`, which re-seals every secret and every data key
// under the first master key (ops.Rewrap).
func keyringCommand(ctx context.Context, cfg Config, sub string, k keyFlags, rest []string, getenv func(string) string, stdout io.Writer) error {
	switch sub {
	case "rewrap":
		if len(rest) > 0 {
			return usageError{fmt.Sprintf("keyring rewrap: unexpected arguments %q", rest)}
		}
		if err := cfg.requireDatabase(); err != nil {
			return err
		}
		if err := cfg.requireMasterKeys(); err != nil {
			return err
		}
		by := actor(k.by, getenv)
		if err := ops.CheckActor(by); err != nil {
			return asUsage(flagError("keyring rewrap", err, ""))
		}
		db, err := database.Open(ctx, cfg.DatabaseURL, 2)
		if err != nil {
			return err
		}
		defer db.Close()
		hooks, err := webhooks.NewStore(db.DB, cfg.MasterKeys)
		if err != nil {
			return err
		}
		audit, err := refdata.New(db)
		if err != nil {
			return err
		}
		keys, err := vault.New(db.DB, cfg.MasterKeys)
		if err != nil {
			return err
		}
		n, err := ops.Rewrap(ctx, hooks, keys, audit, by, cfg.MasterKeys.ActiveID())
		if incomplete := (*ops.RewrapIncompleteError)(nil); errors.As(err, &incomplete) {
			// No key is named unneeded: one still seals what was written
			// meanwhile, and removing it would lose that.
			fmt.Fprintf(stdout, "re-sealed the secrets of %d webhook endpoints and %d data keys under master key %s; not complete\n",
				n.WebhookEndpoints, n.DataKeys, cfg.MasterKeys.ActiveID())
		}
		if err != nil {
			return flagError("keyring rewrap", err, "") // a failure, not the command line's: exit 1
		}
		fmt.Fprintf(stdout, "re-sealed the secrets of %d webhook endpoints and %d data keys under master key %s; no longer needed: %s\n",
			n.WebhookEndpoints, n.DataKeys, cfg.MasterKeys.ActiveID(), cmpOr(strings.Join(cfg.MasterKeys.IDs()[1:], ", "), "none"))
		return nil
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
		// Nothing is stored: a line that could not be written (a full
		// disk behind `> master.key`) is a key nobody has, not a success.
		if _, err := fmt.Fprintln(stdout, line); err != nil {
			return fmt.Errorf("keyring new: print the key line: %w", err)
		}
		return nil
	}
	return usageError{"keyring: unknown subcommand " + sub}
}
