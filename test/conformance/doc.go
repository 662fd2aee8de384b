// Package conformance holds virtshard's launcher pods against KubeVirt's
// own. The reference module beside it (reference/, a Go module of its own
// with kubevirt.io/kubevirt v1.8.1) applies virt-api's create-time defaults
// to every VMI of corpus/ and renders its pod through KubeVirt's
// TemplateService into testdata/kubevirt (make generate); this package's
// test renders the same defaulted VMIs through controllers/template and
// fails on any difference that is neither deliberate (docs/controller.md)
// nor listed as not done yet in testdata/differences.txt.
//
// It is test support: no product package imports it.
package conformance
