package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image tarball loads back with the binary as its only layer, run as
// a non-root user, and labelled with the version.
func TestImageTarballLoadsWithItsConfig(t *testing.T) {
	dir := t.TempDir()
	binary := filepath.Join(dir, "virtshard-controller")
	content := []byte("\x7fELF not really, but bytes to find again")
	if err := os.WriteFile(binary, content, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	if err := Build(Options{Binary: binary, Version: "v1.2.3", Repository: "virtshard/virtshard-controller", Out: out}); err != nil {
		t.Fatal(err)
	}
	img := loadLayout(t, out)
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	switch {
	case c.User != User || c.User == "" || c.User[0] == '0':
		t.Errorf("user %q, want non-root %s", c.User, User)
	case len(c.Entrypoint) != 1 || c.Entrypoint[0] != Path:
		t.Errorf("entrypoint %v, want [%s]", c.Entrypoint, Path)
	case c.Labels[VersionLabel] != "v1.2.3":
		t.Errorf("labels %v, want %s=v1.2.3", c.Labels, VersionLabel)
	case cfg.OS != "linux":
		t.Errorf("os %q, want linux", cfg.OS)
	}
	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %q (%v), want OCI", mt, err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want the binary's only", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	if "/"+hdr.Name != Path || hdr.Mode != 0o755 || hdr.Uid != 0 || !bytes.Equal(got, content) {
		t.Errorf("layer holds %s (mode %o, uid %d, %d bytes), want the binary at %s, 0755, root-owned", hdr.Name, hdr.Mode, hdr.Uid, len(got), Path)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("the layer holds more than the binary: %v", err)
	}
}

func TestBuildRefusesMissingInput(t *testing.T) {
	if err := Build(Options{Out: filepath.Join(t.TempDir(), "x.tar"), Version: "v1"}); err == nil {
		t.Error("built an image without a binary")
	}
}

// loadLayout unpacks the archive and loads its one image, as an OCI
// runtime's import would.
func loadLayout(t *testing.T, archive string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Clean(hdr.Name))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeDir {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI image layout: %v", err)
	}
	manifest, err := index.IndexManifest()
	if err != nil || len(manifest.Manifests) != 1 {
		t.Fatalf("index %+v (%v), want one image", manifest, err)
	}
	if ref := manifest.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; ref != "v1.2.3" {
		t.Errorf("image ref name %q, want the version", ref)
	}
	img, err := index.Image(manifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
