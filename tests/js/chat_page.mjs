// Drives examples/chat in Debian's Chromium for tests/test_chat_example.py: opens the page (the
// URL carries the server, method and run limits), types the question, asks, waits for the run
// to finish, screenshots the page to every path given and prints what the DOM shows as JSON.
//
//   node chat_page.mjs <page URL> <question> <user data dir> <screenshot path>...
import { chromium } from "playwright-core";

const [pageUrl, question, userDataDir, ...screenshots] = process.argv.slice(2);
if (!pageUrl || !question || !userDataDir || !screenshots.length) {
  console.error("usage: node chat_page.mjs <page URL> <question> <user data dir> <screenshot>...");
  process.exit(2);
}
const TIMEOUT = Number(process.env.CHAT_PAGE_TIMEOUT_MS || 600000);

// A persistent context is how Playwright takes the fresh profile directory (--user-data-dir).
const browser = await chromium.launchPersistentContext(userDataDir, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  viewport: { width: 1200, height: 900 },
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const problems = [];
try {
  const page = await browser.newPage();
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(`console error: ${message.text()}`);
  });
  await page.goto(pageUrl);
  await page.fill("textarea[name=question]", question);
  await page.click("button[name=go]");
  await page.waitForSelector("#status[data-state=done], #status[data-state=error]", {
    timeout: TIMEOUT,
  });
  const dom = await page.evaluate(() => ({
    status: document.querySelector("#status").dataset.state,
    statusText: document.querySelector("#status").textContent,
    events: [...document.querySelectorAll("#timeline .event")].map((item) => ({
      type: item.dataset.type,
      text: item.innerText,
    })),
    memory: document.querySelector("#memory").textContent,
    answer: document.querySelector("#answer").textContent,
    answerChunks: Number(document.querySelector("#answer").dataset.chunks || 0),
  }));
  for (const path of screenshots) await page.screenshot({ path, fullPage: true });
  process.stdout.write(JSON.stringify({ ...dom, problems }) + "\n");
} finally {
  await browser.close();
}
