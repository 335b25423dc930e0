package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"

	"hearth/adapters/pubsub"
	"hearth/app/ops"
	"hearth/domain/apperr"
)

// protectFlags are the flags of `app protect`.
type protectFlags struct {
	by    string
	batch int
}

func (p *protectFlags) register(cmd string, fs *flag.FlagSet) {
	if cmd != "protect" {
		return
	}
	fs.StringVar(&p.by, "by", "", "who runs it, for the audit log (defaults to cli:$USER)")
	fs.IntVar(&p.batch, "batch", ops.ProtectBatchDefault, "events sealed per transaction")
}

// protect runs `app protect`: it seals the personal fields of the events
// written before they were sealed, and their copies (ops.Protector); safe
// to run again, and once done it changes nothing.
func protect(ctx context.Context, cfg Config, log *slog.Logger, p protectFlags, getenv func(string) string, stdout io.Writer) error {
	req := ops.ProtectRequest{By: actor(p.by, getenv), Batch: p.batch}
	// The flag's default is the batch already: 0 here was typed, and
	// ProtectRequest would read it as "the default", silently.
	if p.batch == 0 {
		return asUsage(flagError("protect", apperr.Invalid("batch", "must be between 1 and %d, got 0", ops.ProtectBatchMax), ""))
	}
	if err := req.Check(); err != nil {
		return asUsage(flagError("protect", err, ""))
	}
	if err := cfg.requireMasterKeys(); err != nil {
		return err
	}
	dbs, w, err := openWired(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer dbs.close()
	store, err := pubsub.NewStore(dbs.es, watermill.NewSlogLogger(log.With("component", "protect")), w.vault)
	if err != nil {
		return err
	}
	protector, err := ops.NewProtector(store, w.refdata)
	if err != nil {
		return err
	}
	out, err := protector.Protect(ctx, req)
	fmt.Fprintf(stdout, "protect: %d events in clear found in %d batches: %d sealed under their customer's data key (%d keys created), "+
		"%d of erased customers made unreadable (%d aggregates marked erased); %d copies rewritten\n",
		out.Found, out.Batches, out.Sealed, out.Keys, out.Shredded, out.Streams, out.Copies)
	if err != nil {
		return flagError("protect", err, "")
	}
	return nil
}
