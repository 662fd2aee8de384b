# virtshard — `make help` lists the targets.

SHELL := /bin/bash
.DEFAULT_GOAL := help

# virtshard is built with Go 1.27.3, which the go command fetches from the
# module proxy on first use: the machine's Go 1.26.8 has net/http, crypto/tls
# and crypto/x509 vulnerabilities that govulncheck finds (make verify). The
# pinned tools in bench/cluster/tools keep the machine's own Go (local):
# they are test infrastructure, and rebuilding them takes 15 minutes.
export GOTOOLCHAIN := go1.27.3

ROOT  := $(CURDIR)
BIN   := $(ROOT)/bin
TOOLS := $(ROOT)/bench/cluster/tools
GO    ?= go

# Pinned versions. The tools modules' go.mod files pin the sources; these
# only label the binaries.
KUBE_VERSION := v1.37.2
STATICCHECK_VERSION := v0.8.2
GOVULNCHECK_VERSION := v1.9.0
# The Go vulnerability database as of this golang.org/x/vulndb version,
# indexed into bin/vulndb: govulncheck runs offline.
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
# Its CRDs (ServiceMonitor, PodMonitor, PrometheusRule) validate
# deploy/monitoring in the tests.
PROMETHEUS_OPERATOR_VERSION := v0.85.0
# The CSI snapshot CRDs (VolumeSnapshot, VolumeSnapshotContent,
# VolumeSnapshotClass) come from the external-snapshotter's client module,
# which carries them; the local cluster installs them for KubeVirt's
# snapshots and restores (snapshot.storage.k8s.io/v1, which KubeVirt v1.8.1
# reads through the v4 client).
EXTERNAL_SNAPSHOTTER_VERSION := v8.7.0

# Number of kwok nodes `make cluster-up` creates.
NODES ?= 20

# Arguments passed to `go test` for the integration tests.
# -p 1: test binaries run one at a time, so that the bench's smoke runs and
# the replica processes of one package do not load the machine under the
# lease timing of another.
TEST_FLAGS ?= -race -count=1 -p 1 -timeout 20m

KUBE_LDFLAGS := -s -w $(foreach var,\
	gitVersion=$(KUBE_VERSION) gitMajor=1 gitMinor=37 gitTreeState=clean \
	gitCommit=0000000000000000000000000000000000000000 buildDate=1970-01-01T00:00:00Z,\
	-X 'k8s.io/component-base/version.$(var)' -X 'k8s.io/client-go/pkg/version.$(var)')

KUBE_BINS := kube-apiserver kube-controller-manager kube-scheduler kubectl

##@ Everyday

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

# Unit tests live beside the code; the tests that need the local cluster
# live in test/integration.
UNIT_PACKAGES = $$($(GO) list ./... | grep -v /test/integration/)

.PHONY: test-unit
test-unit: ## Run only the unit tests (no cluster), in well under a minute on a warm machine.
	$(GO) test -race -count=1 $(UNIT_PACKAGES)

.PHONY: test-integration
test-integration: tools ## Run only the integration tests, on the local cluster (started if not running).
	$(GO) test $(TEST_FLAGS) ./test/integration/...

.PHONY: test
test: tools verify ## Run every test: verify, conformance, unit, integration (on the local cluster), the differential harness, and each fuzz target briefly.
	$(MAKE) --no-print-directory conformance
	$(MAKE) --no-print-directory test-unit
	$(MAKE) --no-print-directory test-integration
	$(MAKE) --no-print-directory differential
	$(MAKE) --no-print-directory fuzz FUZZTIME=3s

# Fuzz targets as package:Function. Their seed corpora are in code (f.Add)
# and in each package's testdata/fuzz/.
FUZZ_TARGETS := ./shard/fuzz:FuzzRangeArithmetic ./shard/fuzz:FuzzSelector ./shard/fuzz:FuzzOwner \
	./controllers/template:FuzzRender ./controllers/status:FuzzMergePatch
FUZZTIME ?= 1m

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 1m); make test runs them for 3 s.
	@for target in $(FUZZ_TARGETS); do \
	  pkg=$${target%%:*}; fn=$${target##*:}; \
	  echo "fuzz $$fn in $$pkg for $(FUZZTIME)"; \
	  $(GO) test -run='^$$' -fuzz="^$$fn\$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	done

.PHONY: run
run: tools controller ## Run 3 replicas on the local cluster with a demo workload (RUN_ARGS="--vmis 1000"); Ctrl-C stops.
	$(GO) run ./bench/cmd/virtshard-run --controller $(BIN)/virtshard-controller $(RUN_ARGS)

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: image
image: ## Build the controller's image as an OCI archive, without a container engine: bin/virtshard-controller-image.tar.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/image/virtshard-controller ./cmd/virtshard-controller
	$(GO) run ./cmd/virtshard-image --binary $(BIN)/image/virtshard-controller --version $(VERSION) --out $(BIN)/virtshard-controller-image.tar

.PHONY: controller
controller: ## Build bin/virtshard-controller.
	$(GO) build -o $(BIN)/virtshard-controller ./cmd/virtshard-controller

# The release the upgrade scenario rolls the replicas from: the previous
# commit unless PREVIOUS names another.
PREVIOUS ?= HEAD~1
PREVIOUS_ARGS = --previous-controller $(BIN)/virtshard-controller-previous --previous-name "commit $$(git rev-parse --short $(PREVIOUS))"

.PHONY: controller-previous
controller-previous: ## Build bin/virtshard-controller-previous from the commit PREVIOUS (default HEAD~1), for the upgrade scenario.
	rm -rf $(BIN)/previous-src && mkdir -p $(BIN)/previous-src
	git archive "$$(git rev-parse --verify $(PREVIOUS))" | tar -x -C $(BIN)/previous-src
	cd $(BIN)/previous-src && $(GO) build -o $(BIN)/virtshard-controller-previous ./cmd/virtshard-controller
	rm -rf $(BIN)/previous-src

.PHONY: bench
bench: tools controller controller-previous ## Every bench scenario at full size (on the realistic workload the runs up to 10,000 VMIs take over an hour); rewrites BENCHMARKS.md's generated section and docs/bench/.
	$(GO) run ./bench/cmd/virtshard-bench --suite full --controller $(BIN)/virtshard-controller $(PREVIOUS_ARGS) --out docs/bench --update BENCHMARKS.md $(BENCH_ARGS)

.PHONY: bench-upgrade
bench-upgrade: tools controller controller-previous ## The upgrade scenario: 2,000 VMIs moved to a new launcher image by KubeVirt's virt-controller, then by the replicas rolled from PREVIOUS's binary to this one.
	$(GO) run ./bench/cmd/virtshard-bench --scenario upgrade --controller $(BIN)/virtshard-controller $(PREVIOUS_ARGS) $(BENCH_ARGS)

.PHONY: bench-compare
bench-compare: tools controller ## The side-by-side part of make bench: KubeVirt's virt-controller and virtshard with 1-4 replicas on one 2,000-VMI burst each (about 30 minutes); rewrites BENCHMARKS.md's generated section and docs/bench/.
	$(GO) run ./bench/cmd/virtshard-bench --suite compare --controller $(BIN)/virtshard-controller --out docs/bench --update BENCHMARKS.md $(BENCH_ARGS)

.PHONY: bench-smoke
bench-smoke: tools controller ## Every bench scenario small, in about 6 minutes (also part of make test); output in bin/bench-smoke/.
	$(GO) run ./bench/cmd/virtshard-bench --suite smoke --controller $(BIN)/virtshard-controller --out $(BIN)/bench-smoke $(BENCH_ARGS)

.PHONY: bench-chaos
bench-chaos: tools controller ## The chaos scenario: 20,000 VMIs, 4 replicas killed, frozen, cut off, their API server restarted; fails on a fenced-write violation, a duplicate or a stuck VMI.
	$(GO) run ./bench/cmd/virtshard-bench --scenario chaos --controller $(BIN)/virtshard-controller $(BENCH_ARGS)

.PHONY: bench-ceiling
bench-ceiling: tools ## Measure the cluster's own limits: bare pods, and the floor (VMIs with only the writes any controller must make), side by side (see BENCHMARKS.md).
	$(GO) run ./bench/cmd/virtshard-bench --scenario pod-ceiling,floor $(BENCH_ARGS)

.PHONY: differential
differential: tools controller ## Run the scenarios of bench/differential/scenarios under KubeVirt's virt-controller and under virtshard, compare every object (DIFFERENTIAL_ARGS="--scenarios DIR"); report in bin/differential.txt, objects in bin/differential/.
	$(GO) run ./bench/cmd/virtshard-differential --controller $(BIN)/virtshard-controller --report $(BIN)/differential.txt --dump $(BIN)/differential $(DIFFERENTIAL_ARGS)

.PHONY: bench-scenario
bench-scenario: tools controller ## One scenario: BENCH_ARGS="--scenario latency --vmis 1000" (see bench/cmd/virtshard-bench --help).
	$(GO) run ./bench/cmd/virtshard-bench --controller $(BIN)/virtshard-controller $(BENCH_ARGS)

##@ Local cluster

.PHONY: cluster-up
cluster-up: tools ## Start the local kwok cluster (NODES=20); harmless when it runs.
	$(GO) run ./bench/cmd/virtshard-cluster up --nodes $(NODES)

.PHONY: cluster-down
cluster-down: ## Stop the local kwok cluster and delete its data.
	$(GO) run ./bench/cmd/virtshard-cluster down

.PHONY: kubeconfig
kubeconfig: ## Print the local cluster's kubeconfig path.
	@$(GO) run ./bench/cmd/virtshard-cluster kubeconfig

##@ Build

.PHONY: tools
tools: $(BIN)/.kube.stamp $(BIN)/.etcd.stamp $(BIN)/.kwok.stamp $(BIN)/.kwok-stages.stamp $(BIN)/.monitoring-crds.stamp $(BIN)/.vulndb.stamp $(BIN)/.virt-controller.stamp handler ## Build the pinned control-plane tools, KubeVirt's virt-controller and the simulated virt-handler into bin/ (skips what is built).

# The local cluster's simulated virt-handler (bench/handler), which the
# cluster restarts when this binary is newer than the running one. Always
# built: the go command finds what changed.
.PHONY: handler
handler: ## Build bin/virtshard-handler, the local cluster's simulated virt-handler.
	$(GO) build -o $(BIN)/virtshard-handler ./bench/cmd/virtshard-handler

$(BIN)/.kube.stamp: $(TOOLS)/kube/go.mod $(TOOLS)/kube/go.sum $(wildcard $(TOOLS)/kube/*/main.go)
	@mkdir -p $(BIN)
	cd $(TOOLS)/kube && GOTOOLCHAIN=local $(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $(BIN)/ $(addprefix ./,$(KUBE_BINS))
	@touch $@

$(BIN)/.etcd.stamp: $(TOOLS)/etcd/go.mod $(TOOLS)/etcd/go.sum $(TOOLS)/etcd/etcd/main.go
	@mkdir -p $(BIN)
	cd $(TOOLS)/etcd && GOTOOLCHAIN=local $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/ ./etcd
	@touch $@

$(BIN)/.kwok.stamp: $(TOOLS)/kwok/go.mod $(TOOLS)/kwok/go.sum
	@mkdir -p $(BIN)
	cd $(TOOLS)/kwok && GOTOOLCHAIN=local $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/ sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
	@touch $@

# KubeVirt v1.8.1's own virt-controller, the bench's baseline beside
# virtshard (bench/kubevirt), from the pinned module in tools/kubevirt:
# pure Go and static, as upstream builds it (cmd/virt-controller/BUILD.bazel
# static = "on"). No version ldflags: upstream stamps only
# kubevirt.io/client-go/version, which virt-controller never reads, so the
# linker drops it and a stamp changes nothing.
$(BIN)/.virt-controller.stamp: $(TOOLS)/kubevirt/go.mod $(TOOLS)/kubevirt/go.sum $(TOOLS)/kubevirt/virt-controller/main.go
	@mkdir -p $(BIN)
	cd $(TOOLS)/kubevirt && CGO_ENABLED=0 $(KUBEVIRT_ENV) $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/ ./virt-controller
	@touch $@

# kwok's own default node and pod Stages, from the pinned module: the
# cluster runs kwok with Stages as API objects, which has no defaults. The
# node Stages leave alone a node annotated virtshard.io/node-stopped, whose
# kubelet the tests stop (deploy/kwok/stages/node-stopped.yaml).
# Running containers report an image ID, as a kubelet's do: a migration
# target runs its source's container disks by digest, and without one
# KubeVirt refuses to render it.
KWOK_IMAGE_ID := sha256:$(shell printf '%064d' 0 | tr 0 a)
$(BIN)/.kwok-stages.stamp: $(TOOLS)/kwok/go.mod Makefile
	@src=$$(cd $(TOOLS)/kwok && $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage && \
	  mkdir -p $(BIN)/kwok-stages && \
	  install -m 0644 $$src/node/fast/node-initialize.yaml $$src/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
	    $$src/pod/fast/pod-ready.yaml $$src/pod/fast/pod-complete.yaml $$src/pod/fast/pod-delete.yaml $(BIN)/kwok-stages/ && \
	  sed -i 's|^    matchExpressions:|&\n    - key: .metadata.annotations["virtshard.io/node-stopped"]\n      operator: DoesNotExist|' \
	    $(BIN)/kwok-stages/node-initialize.yaml $(BIN)/kwok-stages/node-heartbeat-with-lease.yaml
	@sed -i 's|^\(      \)- image: {{ .image \| Quote }}$$|&\n\1  imageID: "$(KWOK_IMAGE_ID)"|' $(BIN)/kwok-stages/pod-ready.yaml && \
	  test $$(grep -c '^        imageID: ' $(BIN)/kwok-stages/pod-ready.yaml) = 2
	@touch $@

# The Prometheus Operator's CRDs, from its pinned module.
$(BIN)/.monitoring-crds.stamp: Makefile
	@dir=$$($(GO) mod download -json github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && \
	  test -n "$$dir" && mkdir -p $(BIN)/monitoring-crds && \
	  install -m 0644 $$dir/example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,podmonitors,prometheusrules}.yaml $(BIN)/monitoring-crds/
	@touch $@

$(BIN)/.vulndb.stamp: Makefile
	@dir=$$($(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && \
	  test -n "$$dir" && rm -rf $(BIN)/vulndb && \
	  $(GO) run golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION) -vulns $$dir/data/osv -out $(BIN)/vulndb
	@touch $@

##@ Generate and verify

# kubevirt.io/kubevirt is not in the public checksum database; crdgen
# (deploy/crdgen, the product's CRD generator) is a pinned module of its own
# like those in bench/cluster/tools and keeps the local Go.
CRDGEN := $(ROOT)/deploy/crdgen
CRDGEN_ENV := GONOSUMDB=kubevirt.io/kubevirt GOTOOLCHAIN=local
# The same for tools/kubevirt, which builds virt-controller.
KUBEVIRT_ENV := $(CRDGEN_ENV)

# The conformance reference module (test/conformance/reference) runs
# KubeVirt v1.8.1's own code: virt-api's defaults and virt-controller's
# template service on the corpus, virt-config on the cluster-config cases.
REFERENCE := $(ROOT)/test/conformance/reference
GENERATED := deploy/crds bench/kubevirt/crds bench/cdi/crds bench/csi/crds docs/config.md test/conformance/testdata/kubevirt controllers/clusterconfig/testdata/kubevirt-v1.8.1.json

.PHONY: generate
generate: ## Regenerate the KubeVirt CRDs (deploy/crds; the rest, for KubeVirt's virt-controller, in bench/kubevirt/crds), CDI's that KubeVirt reads (bench/cdi/crds), the CSI snapshot CRDs (bench/csi/crds), docs/config.md, and KubeVirt's own renderings the conformance tests hold virtshard against.
	rm -rf deploy/crds bench/kubevirt/crds bench/cdi/crds && cd $(CRDGEN) && $(CRDGEN_ENV) $(GO) run . -others $(ROOT)/bench/kubevirt/crds -cdi $(ROOT)/bench/cdi/crds $(ROOT)/deploy/crds
	@dir=$$($(GO) mod download -json github.com/kubernetes-csi/external-snapshotter/client/v8@$(EXTERNAL_SNAPSHOTTER_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && \
	  test -n "$$dir" && rm -rf bench/csi/crds && mkdir -p bench/csi/crds && \
	  install -m 0644 $$dir/config/crd/snapshot.storage.k8s.io_{volumesnapshots,volumesnapshotcontents,volumesnapshotclasses}.yaml bench/csi/crds/
	$(GO) run ./cmd/virtshard-docs docs/config.md
	rm -rf test/conformance/testdata/kubevirt && mkdir -p $(BIN)
	cd $(REFERENCE) && $(CRDGEN_ENV) $(GO) run . --out ../testdata/kubevirt ../corpus/*.yaml
	cd $(REFERENCE) && $(CRDGEN_ENV) $(GO) run ./clusterconfig $(ROOT)/controllers/clusterconfig/testdata/cases.yaml \
	  > $(ROOT)/controllers/clusterconfig/testdata/kubevirt-v1.8.1.json 2>$(BIN)/clusterconfig-reference.log

.PHONY: conformance
conformance: ## Hold virtshard's launcher pods and virt-api defaults against KubeVirt v1.8.1's (part of make test); prints the share of equal fields.
	@set -o pipefail; $(GO) test -count=1 -v -run '^TestConformance|^TestAPIDefaults' ./test/conformance/ | { grep -Ev '(100\.0% of|^=== RUN)' || true; }

.PHONY: verify
verify: generate tools verify-layering ## Fail on stale generated files, gofmt, go vet, untidy modules, imports against the layering, or RBAC that differs from what the controllers call.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	$(GO) run golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION) -db file://$(BIN)/vulndb ./...
	$(GO) mod tidy -diff
	@for m in kube etcd kwok; do (cd $(TOOLS)/$$m && GOTOOLCHAIN=local $(GO) mod tidy -diff) || exit 1; done
	@for m in $(CRDGEN) $(REFERENCE); do (cd $$m && $(CRDGEN_ENV) $(GO) mod tidy -diff && $(CRDGEN_ENV) $(GO) vet ./...) || exit 1; done
	# tools/kubevirt is vetted as make tools builds it (pure Go, -trimpath),
	# so that vet reuses the build's compiled packages: with the defaults it
	# compiles virt-controller's 1,200 packages again (4 m 40 s here).
	@cd $(TOOLS)/kubevirt && CGO_ENABLED=0 $(KUBEVIRT_ENV) $(GO) mod tidy -diff && CGO_ENABLED=0 $(KUBEVIRT_ENV) $(GO) vet -trimpath ./...
	@git diff --exit-code -- $(GENERATED) || { echo "generated files are stale: run make generate"; exit 1; }
	@test -z "$$(git status --porcelain -- $(GENERATED))" || { echo "generated files have uncommitted changes: run make generate and commit"; exit 1; }
	# The replicas run under deploy/'s RBAC on the local cluster: every call
	# granted, every grant called (deploy/rbac_test.go; 8 s alone here).
	$(GO) test -count=1 -run '^TestRBAC' ./test/integration/deploy/

# The product (the controller, its packages and their tests) imports nothing
# from the bench or the test support: the arrows point one way. The
# controllers' test kit (controllers/sharded/shardedtest, and its fence,
# fencetest) is for their tests
# only: no product code imports it.
PRODUCT_PACKAGES := ./cmd/... ./shard/... ./controllers/... ./replica/... ./client/...

.PHONY: verify-layering
verify-layering: ## Fail if a product package, its tests included, imports bench/ or test/, or product code imports the controllers' test kit.
	@bad=$$(for p in $$($(GO) list $(PRODUCT_PACKAGES)); do \
	    $(GO) list -deps -test -f '{{.ImportPath}}' $$p | grep -E '^github.com/virtshard/virtshard/(bench|test)(/|$$)' | sed "s|^|$$p imports |"; \
	  done | sort -u); \
	test -z "$$bad" || { echo "product packages import bench or test support:"; echo "$$bad"; exit 1; }
	@bad=$$($(GO) list -deps -f '{{.ImportPath}}' ./cmd/... | grep -E '/(shardedtest|fencetest)$$'); \
	test -z "$$bad" || { echo "product code imports the controllers' test kit:"; echo "$$bad"; exit 1; }

.PHONY: clean
clean: cluster-down ## Stop the cluster and remove bin/.
	rm -rf $(BIN)
