// Where the stockade binary is: the platform package npm installed beside this one (the way the
// Codex CLI and biome ship theirs), unless STOCKADE_BINARY names another.
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/** The platform packages published beside `@stockade-sh/cli`, by `${process.platform}-${process.arch}`. */
const PLATFORM_PACKAGES: Record<string, string> = {
  "linux-x64": "@stockade-sh/linux-x64",
};

/** The path of the stockade binary, or an Error whose message says what to do. */
export function binaryPath(): string {
  const override = process.env.STOCKADE_BINARY;
  if (override) {
    if (!existsSync(override)) {
      throw new Error(`STOCKADE_BINARY names ${override}, which does not exist; point it at a stockade binary or unset it`);
    }
    return override;
  }
  const platform = `${process.platform}-${process.arch}`;
  const pkg = PLATFORM_PACKAGES[platform];
  if (pkg === undefined) {
    throw new Error(
      `the @stockade-sh/cli npm package has no binary for ${platform} (only ${Object.keys(PLATFORM_PACKAGES).join(", ")}); ` +
        "build one with `cargo install --path crates/stockade` (a checkout) and set STOCKADE_BINARY to its path",
    );
  }
  const require = createRequire(import.meta.url);
  let manifest: string;
  try {
    manifest = require.resolve(`${pkg}/package.json`);
  } catch {
    throw new Error(
      `the package ${pkg}, which holds the stockade binary, is not installed (npm skips optional dependencies with --omit=optional or --no-optional); ` +
        `reinstall with \`npm install @stockade-sh/cli\` and without those flags`,
    );
  }
  const bin = join(dirname(manifest), "bin", "stockade");
  if (!existsSync(bin)) {
    throw new Error(`${pkg} is installed but holds no binary at ${bin}; reinstall it with \`npm install @stockade-sh/cli\``);
  }
  return bin;
}
