package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"hearth/adapters/refdata"
	"hearth/app/access"
	"hearth/internal/database"
	"hearth/migrations"
)

type keyFlags struct {
	merchant, role, staff string
}

func (k *keyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.merchant, "merchant", "", "merchant name (created if needed)")
	fs.StringVar(&k.role, "role", "", "operator, worker or admin")
	fs.StringVar(&k.staff, "staff", "", "staff member id (worker keys only)")
}

// createKey creates a key and prints it alone on the last line of stdout.
func createKey(ctx context.Context, cfg Config, k keyFlags, stdout io.Writer) error {
	if k.merchant == "" {
		return usageError{"keys create: --merchant is required"}
	}
	role, ok := access.ParseRole(k.role)
	if !ok {
		return usageError{fmt.Sprintf("keys create: --role %q: must be operator, worker or admin", k.role)}
	}
	db, err := database.Open(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer db.Close()
	if _, err := migrations.Apply(ctx, db.DB, migrations.EventStore); err != nil {
		return err
	}
	store, err := refdata.New(db)
	if err != nil {
		return err
	}
	key, err := store.CreateKey(ctx, k.merchant, role, k.staff)
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	fmt.Fprintf(stdout, "# %s key %s for merchant %q (%s); it is shown only now:\n%s\n",
		role, key.ID, k.merchant, key.MerchantID, key.Secret)
	return nil
}
