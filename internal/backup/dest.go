package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Destination is where a backup's files go: a directory or an S3 bucket
// prefix. Names are slash-separated paths relative to the backup's root.
type Destination interface {
	// Put stores data under name, replacing any file of that name; when it
	// returns nil the file is durable (fsynced, or acknowledged by S3).
	Put(ctx context.Context, name string, data []byte) error
	// Get returns the file's bytes; a missing file is an error matching
	// fs.ErrNotExist.
	Get(ctx context.Context, name string) ([]byte, error)
	// List returns the names of every file, sorted.
	List(ctx context.Context) ([]string, error)
	// String is the destination's URL.
	String() string
}

// Open returns the destination of a URL:
//
//	file:///abs/dir
//	s3://bucket/prefix?endpoint=http://host:port&region=us-east-1
//
// For s3, credentials come from the environment (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, or MINIO_ACCESS_KEY and MINIO_SECRET_KEY) or the
// URL's user info (s3://key:secret@bucket/prefix, for tests); the endpoint
// defaults to AWS (https://s3.amazonaws.com) and an http:// endpoint is
// spoken without TLS.
func Open(rawURL string) (Destination, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("backup: destination %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("backup: destination %q: a file URL names a local directory (file:///dir)", rawURL)
		}
		if u.Path == "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("backup: destination %q: the directory must be absolute (file:///dir)", rawURL)
		}
		return &dirDest{dir: filepath.Clean(u.Path)}, nil
	case "s3":
		return openS3(u)
	}
	return nil, fmt.Errorf("backup: destination %q: unknown scheme (want file:///dir or s3://bucket/prefix)", rawURL)
}

// dirDest keeps the files in a local directory.
type dirDest struct{ dir string }

func (d *dirDest) String() string { return "file://" + filepath.ToSlash(d.dir) }

func (d *dirDest) path(name string) (string, error) {
	if !fs.ValidPath(name) || name == "." {
		return "", fmt.Errorf("backup: bad file name %q", name)
	}
	return filepath.Join(d.dir, filepath.FromSlash(name)), nil
}

// Put writes a temporary file, syncs it and renames it into place, then
// syncs the directory: a crash leaves the old file or the new one.
func (d *dirDest) Put(_ context.Context, name string, data []byte) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(p)+"-*")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("backup: write %s: %w", name, err)
	}
	df, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer df.Close()
	if err := df.Sync(); err != nil {
		return fmt.Errorf("backup: sync %s: %w", dir, err)
	}
	return nil
}

func (d *dirDest) Get(_ context.Context, name string) ([]byte, error) {
	p, err := d.path(name)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("backup: read %s: %w", name, err)
	}
	return b, nil
}

func (d *dirDest) List(_ context.Context) ([]string, error) {
	var out []string
	err := filepath.WalkDir(d.dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == d.dir {
				return fs.SkipAll
			}
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".tmp-") {
			return nil
		}
		rel, err := filepath.Rel(d.dir, p)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("backup: list %s: %w", d.dir, err)
	}
	sort.Strings(out)
	return out, nil
}

// s3Dest keeps the files as objects under a bucket's prefix.
type s3Dest struct {
	raw    string
	client *minio.Client
	bucket string
	prefix string // "" or ending in "/"
}

func openS3(u *url.URL) (Destination, error) {
	q := u.Query()
	endpoint := q.Get("endpoint")
	if endpoint == "" {
		endpoint = "https://s3.amazonaws.com"
	}
	eu, err := url.Parse(endpoint)
	if err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") {
		return nil, fmt.Errorf("backup: s3 endpoint %q: want http://host:port or https://host", endpoint)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("backup: destination %q names no bucket (s3://bucket/prefix)", u.Redacted())
	}
	key, secret := firstEnv("AWS_ACCESS_KEY_ID", "MINIO_ACCESS_KEY"), firstEnv("AWS_SECRET_ACCESS_KEY", "MINIO_SECRET_KEY")
	if u.User != nil {
		key = u.User.Username()
		secret, _ = u.User.Password()
	}
	client, err := minio.New(eu.Host, &minio.Options{
		Creds:  credentials.NewStaticV4(key, secret, firstEnv("AWS_SESSION_TOKEN")),
		Secure: eu.Scheme == "https",
		Region: q.Get("region"),
	})
	if err != nil {
		return nil, fmt.Errorf("backup: s3 destination %q: %w", u.Redacted(), err)
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	return &s3Dest{raw: u.Redacted(), client: client, bucket: u.Host, prefix: prefix}, nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

func (d *s3Dest) String() string { return d.raw }

func (d *s3Dest) Put(ctx context.Context, name string, data []byte) error {
	if !fs.ValidPath(name) || name == "." {
		return fmt.Errorf("backup: bad file name %q", name)
	}
	_, err := d.client.PutObject(ctx, d.bucket, d.prefix+name, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", SendContentMd5: true})
	if err != nil {
		return fmt.Errorf("backup: put %s: %w", name, err)
	}
	return nil
}

func (d *s3Dest) Get(ctx context.Context, name string) ([]byte, error) {
	obj, err := d.client.GetObject(ctx, d.bucket, d.prefix+name, minio.GetObjectOptions{})
	if err == nil {
		var b []byte
		b, err = io.ReadAll(obj)
		obj.Close()
		if err == nil {
			return b, nil
		}
	}
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		err = fmt.Errorf("%w (%v)", fs.ErrNotExist, err)
	}
	return nil, fmt.Errorf("backup: read %s: %w", name, err)
}

func (d *s3Dest) List(ctx context.Context) ([]string, error) {
	var out []string
	for o := range d.client.ListObjects(ctx, d.bucket, minio.ListObjectsOptions{Prefix: d.prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("backup: list %s: %w", d.raw, o.Err)
		}
		out = append(out, path.Clean(strings.TrimPrefix(o.Key, d.prefix)))
	}
	sort.Strings(out)
	return out, nil
}
