// ESLint 9 flat config for the one JavaScript file of the package: the explorer page
// (src/selfattn/explain/static/explorer.js), served by `selfattn serve` and inlined into the HTML report.
// `make lint` runs it with `npx --yes eslint@9`, so nothing is installed into the repository; for the
// same reason this file imports no plugin: the rules of eslint's "recommended" set that catch real
// mistakes are listed here, and the browser globals the page uses are declared by name.
export default [
  {
    files: ["src/selfattn/explain/static/**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "script",
      globals: {  // exactly those explorer.js uses
        window: "readonly", document: "readonly", fetch: "readonly", URL: "readonly", setTimeout: "readonly",
        clearTimeout: "readonly", atob: "readonly", Float32Array: "readonly", Float64Array: "readonly",
        Uint8Array: "readonly", performance: "readonly",
      },
    },
    rules: {
      "no-undef": "error",
      "no-unused-vars": ["error", { args: "none" }],
      "no-redeclare": "error",
      "no-dupe-keys": "error",
      "no-dupe-args": "error",
      "no-duplicate-case": "error",
      "no-unreachable": "error",
      "no-const-assign": "error",
      "no-func-assign": "error",
      "no-self-assign": "error",
      "no-self-compare": "error",
      "no-use-before-define": ["error", { functions: false, classes: true, variables: true }],
      "no-shadow-restricted-names": "error",
      "use-isnan": "error",
      "valid-typeof": "error",
      "eqeqeq": ["error", "smart"],
      "no-var": "error",
      "prefer-const": "error",
    },
  },
];
