// kvtier-scorecard runs operator-sdk's static scorecard tests (the olm and basic suites the
// scorecard-test image runs inside a pod) directly on a bundle directory, without a cluster.
// hack/validators/build compiles it inside operator-sdk's own module, whose internal
// scorecard/tests package it calls.
//
// Usage: kvtier-scorecard BUNDLE_DIR TEST...   (prints one JSON TestStatus per test)
package main

import (
	"encoding/json"
	"fmt"
	"os"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"

	registryutil "github.com/operator-framework/operator-sdk/internal/registry"
	"github.com/operator-framework/operator-sdk/internal/scorecard/tests"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: kvtier-scorecard BUNDLE_DIR TEST...")
		os.Exit(2)
	}
	root := os.Args[1]
	bundle, err := apimanifests.GetBundleFromDir(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	metadata, _, err := registryutil.FindBundleMetadata(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := map[string]scapiv1alpha3.TestStatus{}
	for _, name := range os.Args[2:] {
		switch name {
		case tests.OLMBundleValidationTest:
			out[name] = tests.BundleValidationTest(root, metadata)
		case tests.OLMCRDsHaveValidationTest:
			out[name] = tests.CRDsHaveValidationTest(bundle)
		case tests.OLMCRDsHaveResourcesTest:
			out[name] = tests.CRDsHaveResourcesTest(bundle)
		case tests.OLMSpecDescriptorsTest:
			out[name] = tests.SpecDescriptorsTest(bundle)
		case tests.OLMStatusDescriptorsTest:
			out[name] = tests.StatusDescriptorsTest(bundle)
		case tests.BasicCheckSpecTest:
			out[name] = tests.CheckSpecTest(bundle)
		default:
			fmt.Fprintf(os.Stderr, "unknown static scorecard test %q\n", name)
			os.Exit(2)
		}
	}
	text, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(text))
}
