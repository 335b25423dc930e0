package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"hearth/app/ops"
	"hearth/domain/apperr"
	httpport "hearth/ports/http"
)

// customerFlags are the flags of `app customers export`.
type customerFlags struct {
	merchant, by string
}

func (c *customerFlags) register(cmd string, fs *flag.FlagSet) {
	if cmd != "customers" {
		return
	}
	fs.StringVar(&c.merchant, "merchant", "", "the customer's merchant (a name; required)")
	fs.StringVar(&c.by, "by", "", "who exports, for the audit log (defaults to cli:$USER)")
}

// customersExport runs `app customers export --merchant NAME ID`: the
// document GET /v1/customers/{id}/export answers, from the same use case,
// on stdout; the export is recorded in the audit log as done by --by.
func customersExport(ctx context.Context, cfg Config, log *slog.Logger, c customerFlags, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 1 || c.merchant == "" {
		return usageError{"customers export: --merchant NAME CUSTOMER_ID [--by WHO]"}
	}
	by := actor(c.by, getenv)
	if err := ops.CheckActor(by); err != nil {
		return asUsage(flagError("customers export", err, ""))
	}
	dbs, w, err := openWired(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer dbs.close()
	merchantID, err := w.keys.MerchantID(ctx, c.merchant)
	if errors.Is(err, apperr.ErrNotFound) {
		return fmt.Errorf("customers export: no merchant named %q", c.merchant)
	}
	if err != nil {
		return fmt.Errorf("customers export: %w", err)
	}
	x, err := w.exports.ExportCustomer(ctx, ops.ExportRequest{By: by, MerchantID: merchantID, CustomerID: args[0]})
	if errors.Is(err, apperr.ErrNotFound) {
		return fmt.Errorf("customers export: merchant %q has no customer %s", c.merchant, args[0])
	}
	if err != nil {
		return flagError("customers export", err, "")
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(httpport.CustomerExportBodyOf(x))
}
