// Drives examples/chat in Debian's Chromium for tests/test_chat_example.py: opens the page (the
// URL carries the server, method and run limits), types the question, asks, waits for the run
// to finish, screenshots the page to every path given and prints what the DOM shows as JSON.
//
//   node chat_page.mjs <page URL> <question> <user data dir> <screenshot path>...
import { ask, launch, readChat } from "./chromium.mjs";

const [pageUrl, question, userDataDir, ...screenshots] = process.argv.slice(2);
if (!pageUrl || !question || !userDataDir || !screenshots.length) {
  console.error("usage: node chat_page.mjs <page URL> <question> <user data dir> <screenshot>...");
  process.exit(2);
}
const TIMEOUT = Number(process.env.CHAT_PAGE_TIMEOUT_MS || 600000);

const browser = await launch(userDataDir);
const problems = [];
try {
  const page = await ask(browser, pageUrl, question, problems);
  await page.waitForSelector("#status[data-state=done], #status[data-state=error]", {
    timeout: TIMEOUT,
  });
  const dom = await page.evaluate(readChat);
  for (const path of screenshots) await page.screenshot({ path, fullPage: true });
  process.stdout.write(JSON.stringify({ ...dom, problems }) + "\n");
} finally {
  await browser.close();
}
