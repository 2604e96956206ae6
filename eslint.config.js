// ESLint 9 flat config for the JavaScript of the package: the explorer page's ES modules
// (src/selfattn/explainer/web/static/**/*.js), which views/report.py inlines as one script into the HTML
// report and the app's page (views/bundle.py). `make lint` runs it with `npx --yes eslint@9`, so nothing
// is installed into the repository; for the same reason this file imports no plugin: the rules of
// eslint's "recommended" set that catch real mistakes are listed here, and the browser globals the
// page uses are declared by name.
export default [
  {
    files: ["src/selfattn/explainer/web/static/**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: {  // exactly those the page uses
        window: "readonly", document: "readonly", fetch: "readonly", URL: "readonly", setTimeout: "readonly",
        clearTimeout: "readonly", atob: "readonly", Float32Array: "readonly", Float64Array: "readonly",
        Uint8Array: "readonly", Uint16Array: "readonly", Uint32Array: "readonly", Int32Array: "readonly",
        performance: "readonly", Blob: "readonly", Response: "readonly", DecompressionStream: "readonly",
        URLSearchParams: "readonly", Option: "readonly",
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
      "no-restricted-syntax": ["error",  // views/bundle.py inlines only these forms (it refuses the others too)
        { selector: "ExportNamedDeclaration[declaration=null]", message: "export a declaration (export function/const/class)" },
        { selector: "ExportDefaultDeclaration", message: "no default export: the bundle keeps named exports only" },
        { selector: "ExportAllDeclaration", message: "no export *: the bundle keeps named exports only" },
        { selector: "ExportNamedDeclaration > VariableDeclaration[kind='let']", message: "no export let: it would not be live once bundled" },
        { selector: "ImportNamespaceSpecifier", message: "no import *: name what you import" },
        { selector: "ImportDefaultSpecifier", message: "no default import" },
        { selector: "ImportExpression", message: "no dynamic import()" },
      ],
    },
  },
];
