package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Options of an image build.
type Options struct {
	Binary, Version, Repository, Out string
}

// Image facts the deployment relies on.
const (
	// Path of the binary in the image, and the entrypoint.
	Path = "/virtshard-controller"
	// User is non-root (the Pod Security "restricted" profile needs it),
	// numeric so that runAsNonRoot can check it.
	User = "65532:65532"
	// VersionLabel carries the version.
	VersionLabel = "org.opencontainers.image.version"
)

// Build writes the image tarball.
func Build(o Options) error {
	if o.Binary == "" || o.Out == "" || o.Version == "" {
		return errors.New("--binary, --out and --version are required")
	}
	binary, err := os.ReadFile(o.Binary)
	if err != nil {
		return err
	}
	layer, err := binaryLayer(binary)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1), layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint = []string{Path}
	cfg.Config.User = User
	cfg.Config.WorkingDir = "/"
	cfg.Config.Labels = map[string]string{
		VersionLabel:                           o.Version,
		"org.opencontainers.image.title":       "virtshard-controller",
		"org.opencontainers.image.description": "virtshard: KubeVirt's virt-controller, sharded",
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	ref, err := name.NewTag(o.Repository + ":" + o.Version)
	if err != nil {
		return fmt.Errorf("image name: %w", err)
	}
	dir, err := os.MkdirTemp("", "virtshard-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := path.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.Name(),
	})); err != nil {
		return err
	}
	return tarDir(dir, o.Out)
}

// tarDir writes the OCI image layout in dir as a tar archive (what
// `skopeo copy oci-archive:`, `podman load` and `ctr import` read).
func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := tar.NewWriter(f)
	err = w.AddFS(os.DirFS(dir))
	if closeErr := w.Close(); err == nil {
		err = closeErr
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	return err
}

// binaryLayer is one layer with the binary at Path, owned by root and
// executable by all: the non-root user runs it, and cannot change it.
func binaryLayer(binary []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	if err := w.WriteHeader(&tar.Header{Name: Path[1:], Mode: 0o755, Size: int64(len(binary)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := w.Write(binary); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
