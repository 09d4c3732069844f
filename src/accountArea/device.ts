/**
 * A session's device as a customer reads it ("Chrome 131 on Android") from its User-Agent: the
 * browser and its major version, and the operating system. Unknown parts are left out; the
 * result is at most `DEVICE_CHARS_MAX` characters whatever the header holds.
 */
export const DEVICE_CHARS_MAX = 60;

/** Checked in order: Edge and Opera say "Chrome" too, Chrome says "Safari". */
const BROWSERS: readonly [name: string, pattern: RegExp][] = [
  ["Edge", /\bEdg(?:e|A|iOS)?\/(\d+)/],
  ["Opera", /\bOPR\/(\d+)/],
  ["Samsung Internet", /\bSamsungBrowser\/(\d+)/],
  ["Firefox", /\b(?:Firefox|FxiOS)\/(\d+)/],
  ["Chrome", /\b(?:Chrome|CriOS)\/(\d+)/],
  ["Safari", /\bVersion\/(\d+)[.\d]* (?:Mobile\/\w+ )?Safari\//],
  ["curl", /^curl\/(\d+)/],
];
const SYSTEMS: readonly [name: string, pattern: RegExp][] = [
  ["Android", /\bAndroid\b/],
  ["iOS", /\b(?:iPhone|iPad|iPod)\b/],
  ["Windows", /\bWindows\b/],
  ["macOS", /\bMac OS X\b/],
  ["ChromeOS", /\bCrOS\b/],
  ["Linux", /\bLinux\b/],
];

export function deviceOf(userAgent: string | null): string | null {
  if (!userAgent) return null;
  const browser = BROWSERS.map(([name, pattern]) => [name, pattern.exec(userAgent)] as const).find(([, m]) => m);
  const system = SYSTEMS.find(([, pattern]) => pattern.test(userAgent))?.[0];
  const named = browser ? `${browser[0]} ${browser[1]![1]}` : null;
  const device = named && system ? `${named} on ${system}` : (named ?? system ?? userAgent.replace(/[^\x20-\x7e]/g, ""));
  return device.slice(0, DEVICE_CHARS_MAX) || null;
}
