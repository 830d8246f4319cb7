// Builds the card (ui/card.jsx) into the plugin's package as one file,
// src/overseer_airflow/static/overseer-card.js, which the plugin serves and
// Airflow's UI imports (see ui/card.jsx for Airflow 3.3's contract): a UMD
// bundle whose global is `AirflowPlugin`, with React and its JSX runtime taken
// from the globals Airflow's UI sets (`React`, `ReactJSXRuntime`), never bundled.
import { defineConfig } from "vite";

export default defineConfig({
  // JSX through React's automatic runtime (`react/jsx-runtime`).
  oxc: { jsx: { runtime: "automatic" } },
  build: {
    outDir: "src/overseer_airflow/static",
    emptyOutDir: true,
    // No source map or hashed name: one file the plugin serves by a fixed name.
    sourcemap: false,
    lib: {
      entry: "ui/card.jsx",
      name: "AirflowPlugin",
      formats: ["umd"],
      fileName: () => "overseer-card.js",
    },
    rolldownOptions: {
      external: ["react", "react/jsx-runtime"],
      output: {
        globals: { react: "React", "react/jsx-runtime": "ReactJSXRuntime" },
        exports: "default",
      },
    },
  },
});
