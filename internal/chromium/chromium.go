// Package chromium starts Debian's headless Chromium for chromedp: the
// console's browser tests (cmd/app) and the bench's page timings
// (cmd/bench) drive the same browser with the same flags.
package chromium

import (
	"context"
	"errors"
	"os"
	"os/exec"

	"github.com/chromedp/chromedp"

	"hearth/internal/harness"
)

// Path is the Chromium binary: $CHROMIUM when set, else the first of
// Debian's chromium or a chromium/chrome on PATH. "" when none is found.
func Path() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// ErrNotFound is Start without a Chromium on this machine, where it could
// not install Debian's (not root, or no apt-get).
var ErrNotFound = errors.New("chromium not found: apt-get install chromium, or set CHROMIUM")

// Options are the browser's.
type Options struct {
	// UserDataDir is a fresh profile directory (a test's t.TempDir()).
	// Required: every browser starts with no cookies, cache or history.
	UserDataDir string
	// Width and Height size the window. Default 1280 x 900.
	Width, Height int
}

// Start launches a headless Chromium and returns a chromedp context on its
// first tab; stop closes the browser and waits for the process to end. On a
// machine without one it installs Debian's chromium first when it can, as
// the Postgres and NATS harnesses install their servers.
func Start(parent context.Context, o Options) (ctx context.Context, stop func(), err error) {
	path := Path()
	if path == "" && harness.Available() {
		if path, err = harness.Ensure(parent, "chromium", "chromium"); err != nil {
			return nil, nil, err
		}
	}
	if path == "" {
		return nil, nil, ErrNotFound
	}
	if o.UserDataDir == "" {
		return nil, nil, errors.New("chromium.Start: UserDataDir is required")
	}
	w, h := o.Width, o.Height
	if w == 0 || h == 0 {
		w, h = 1280, 900
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(parent,
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root in CI, where the sandbox cannot start
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.UserDataDir(o.UserDataDir),
		chromedp.WindowSize(w, h),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		return nil, nil, err
	}
	return ctx, func() {
		_ = chromedp.Cancel(ctx)
		cancel()
		cancelAlloc()
	}, nil
}
