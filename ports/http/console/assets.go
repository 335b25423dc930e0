package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
)

// static holds the console's assets. htmx.min.js is htmx 2.0.11 as the npm
// package htmx.org ships it (dist/htmx.min.js, taken with `npm pack
// htmx.org@2`), its licence beside it (htmx.LICENSE, 0BSD); nothing is
// built.
//
//go:embed static
var static embed.FS

// asset is one static file, with its gzipped form when smaller.
type asset struct {
	body, gz    []byte
	contentType string
	version     string // a hash of the content, in the file's address
}

type assets struct{ byName map[string]asset }

// loadAssets reads and compresses the assets once.
func loadAssets() (*assets, error) {
	as := &assets{byName: map[string]asset{}}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		a := asset{body: body, contentType: mime.TypeByExtension(path.Ext(p)), version: hex.EncodeToString(sum[:6])}
		if a.contentType == "" {
			a.contentType = "text/plain; charset=utf-8"
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(body)
		if err := zw.Close(); err != nil {
			return err
		}
		if buf.Len() < len(body) {
			a.gz = buf.Bytes()
		}
		as.byName[path.Base(p)] = a
		return nil
	})
	return as, err
}

// url is the address of an asset, which changes with its content: it is
// cached for a year.
func (as *assets) url(name string) string {
	return "/console/static/" + name + "?v=" + as.byName[name].version
}

func (c *Console) serveAsset(w http.ResponseWriter, r *http.Request) {
	a, ok := c.assets.byName[r.PathValue("file")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("Content-Type", a.contentType)
	h.Add("Vary", "Accept-Encoding")
	body := a.body
	if a.gz != nil && acceptsGzip(r) {
		body = a.gz
		h.Set("Content-Encoding", "gzip")
	}
	_, _ = w.Write(body)
}
